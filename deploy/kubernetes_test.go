package deploy_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/idempotency-proxy/idempotency-proxy/config"
)

// The ports the binary listens on by default and the deployment uses.
const (
	proxyPort = 8080
	adminPort = 9090
	appPort   = 3000

	proxyContainerName = "idempotency-proxy"
	redisURLEnv        = "IDEMPOTENCY_PROXY_STORE_REDIS_URL"
	configMountDir     = "/etc/idempotency-proxy"
)

// intOrString is a Kubernetes port reference: a number or a port name.
type intOrString string

func (v *intOrString) UnmarshalYAML(n *yaml.Node) error {
	*v = intOrString(n.Value)
	return nil
}

type probe struct {
	HTTPGet struct {
		Path string      `yaml:"path"`
		Port intOrString `yaml:"port"`
	} `yaml:"httpGet"`
}

type envVar struct {
	Name      string `yaml:"name"`
	ValueFrom struct {
		SecretKeyRef struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type volume struct {
	Name      string `yaml:"name"`
	ConfigMap struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
}

type container struct {
	Name  string `yaml:"name"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env          []envVar `yaml:"env"`
	StartupProbe *struct {
		Exec struct {
			Command []string `yaml:"command"`
		} `yaml:"exec"`
		PeriodSeconds    int `yaml:"periodSeconds"`
		TimeoutSeconds   int `yaml:"timeoutSeconds"`
		FailureThreshold int `yaml:"failureThreshold"`
	} `yaml:"startupProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Lifecycle      struct {
		PreStop struct {
			Sleep struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		RunAsUser                int   `yaml:"runAsUser"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

// port resolves a probe or Service port reference to a container port number.
func (c container) port(t *testing.T, ref intOrString) int {
	t.Helper()
	if n, err := strconv.Atoi(string(ref)); err == nil {
		return n
	}
	for _, p := range c.Ports {
		if p.Name == string(ref) {
			return p.ContainerPort
		}
	}
	t.Errorf("container %s has no port named %q", c.Name, ref)
	return 0
}

// portName returns the name of a container port number.
func (c container) portName(t *testing.T, port int) string {
	t.Helper()
	for _, p := range c.Ports {
		if p.ContainerPort == port {
			return p.Name
		}
	}
	t.Errorf("container %s does not declare port %d", c.Name, port)
	return ""
}

type manifest struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Selector yaml.Node `yaml:"selector"`
		Ports    []struct {
			Port       int         `yaml:"port"`
			TargetPort intOrString `yaml:"targetPort"`
		} `yaml:"ports"`
		Template struct {
			Metadata struct {
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec struct {
				TerminationGracePeriodSeconds int         `yaml:"terminationGracePeriodSeconds"`
				Containers                    []container `yaml:"containers"`
				Volumes                       []volume    `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// manifests returns the objects kustomization.yaml applies, by kind.
func manifests(t *testing.T) map[string]manifest {
	t.Helper()
	var kust struct {
		Resources []string `yaml:"resources"`
	}
	decodeYAML(t, "kubernetes/kustomization.yaml", &kust, false)
	byKind := map[string]manifest{}
	for _, res := range kust.Resources {
		var m manifest
		decodeYAML(t, filepath.Join("kubernetes", res), &m, false)
		if _, dup := byKind[m.Kind]; dup {
			t.Fatalf("two %s objects; the checks here expect one", m.Kind)
		}
		byKind[m.Kind] = m
	}
	for _, kind := range []string{"Deployment", "Service", "ConfigMap"} {
		if _, ok := byKind[kind]; !ok {
			t.Fatalf("kustomization.yaml applies no %s", kind)
		}
	}
	return byKind
}

// deploymentContainers returns the proxy sidecar and the application container.
func deploymentContainers(t *testing.T) (proxyC, appC container) {
	t.Helper()
	cs := manifests(t)["Deployment"].Spec.Template.Spec.Containers
	if len(cs) != 2 {
		t.Fatalf("deployment has %d containers, want the application and the proxy", len(cs))
	}
	i := slices.IndexFunc(cs, func(c container) bool { return c.Name == proxyContainerName })
	if i < 0 {
		t.Fatalf("no container named %s", proxyContainerName)
	}
	return cs[i], cs[1-i]
}

// loadConfigMap validates the ConfigMap's config.yaml with the proxy's own
// loader, with the Redis URL the Deployment injects from the Secret.
func loadConfigMap(t *testing.T, cm manifest) *config.Config {
	t.Helper()
	data, ok := cm.Data["config.yaml"]
	if !ok {
		t.Fatalf("ConfigMap %s has no config.yaml", cm.Metadata.Name)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.Source{
		File: path,
		Env:  []string{redisURLEnv + "=redis://redis.billing.svc:6379/0"},
	})
	if err != nil {
		t.Fatalf("ConfigMap config.yaml is invalid:\n%v", err)
	}
	return cfg
}
