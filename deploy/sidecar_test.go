package deploy_test

import (
	"net"
	"slices"
	"strconv"
	"testing"
	"time"
)

// shutdownOverrun is how long the binary may run past shutdown_timeout:
// requests aborted at the deadline get 5s to settle their keys, and the
// admin listener 1s to close (cmd/idempotency-proxy/serve.go).
const shutdownOverrun = 6 * time.Second

func TestSidecarPortsAndProbes(t *testing.T) {
	objs := manifests(t)
	proxyC, appC := deploymentContainers(t)

	for _, want := range []int{proxyPort, adminPort} {
		if proxyC.portName(t, want) == "" {
			t.Errorf("proxy container: port %d has no name; probes and scrape config refer to it by name", want)
		}
	}
	if got := len(appC.Ports); got != 1 || appC.Ports[0].ContainerPort != appPort {
		t.Errorf("application container ports = %+v, want only %d", appC.Ports, appPort)
	}

	probes := []struct {
		name     string
		probe    *probe
		wantPath string
	}{
		{name: "readiness", probe: proxyC.ReadinessProbe, wantPath: "/readyz"},
		{name: "liveness", probe: proxyC.LivenessProbe, wantPath: "/healthz"},
	}
	for _, tt := range probes {
		t.Run(tt.name, func(t *testing.T) {
			if tt.probe == nil {
				t.Fatalf("proxy container has no %s probe", tt.name)
			}
			if got := tt.probe.HTTPGet.Path; got != tt.wantPath {
				t.Errorf("path = %q, want %q", got, tt.wantPath)
			}
			if got := proxyC.port(t, tt.probe.HTTPGet.Port); got != adminPort {
				t.Errorf("port = %d, want the admin port %d", got, adminPort)
			}
		})
	}

	svc := objs["Service"]
	if len(svc.Spec.Ports) == 0 {
		t.Fatal("Service has no ports")
	}
	for _, p := range svc.Spec.Ports {
		if got := proxyC.port(t, p.TargetPort); got != proxyPort {
			t.Errorf("Service port %d targets %q = %d, want the proxy port %d (never the app's %d)",
				p.Port, p.TargetPort, got, proxyPort, appPort)
		}
	}
	var selector map[string]string
	if err := svc.Spec.Selector.Decode(&selector); err != nil || len(selector) == 0 {
		t.Fatalf("Service selector: %v", err)
	}
	podLabels := objs["Deployment"].Spec.Template.Metadata.Labels
	for k, v := range selector {
		if podLabels[k] != v {
			t.Errorf("Service selects %s=%s, pod template has %q", k, v, podLabels[k])
		}
	}

	ann := objs["Deployment"].Spec.Template.Metadata.Annotations
	wantAnn := map[string]string{
		"prometheus.io/scrape": "true",
		"prometheus.io/port":   strconv.Itoa(adminPort),
		"prometheus.io/path":   "/metrics",
	}
	for k, want := range wantAnn {
		if got := ann[k]; got != want {
			t.Errorf("pod annotation %s = %q, want %q", k, got, want)
		}
	}
}

func TestSidecarConfig(t *testing.T) {
	objs := manifests(t)
	proxyC, appC := deploymentContainers(t)
	cm := objs["ConfigMap"]
	cfg := loadConfigMap(t, cm)

	listeners := []struct {
		name, addr string
		want       int
	}{
		{name: "listen", addr: cfg.Listen, want: proxyPort},
		{name: "admin_listen", addr: cfg.AdminListen, want: adminPort},
		{name: "upstream.url", addr: cfg.Upstream.URL.Host, want: appC.Ports[0].ContainerPort},
	}
	for _, l := range listeners {
		_, port, err := net.SplitHostPort(l.addr)
		if err != nil || port != strconv.Itoa(l.want) {
			t.Errorf("config %s = %q, want port %d", l.name, l.addr, l.want)
		}
	}
	if host := cfg.Upstream.URL.Hostname(); host != "127.0.0.1" {
		t.Errorf("upstream host = %q, want 127.0.0.1: the application is in the same pod", host)
	}
	if cfg.Store.Kind != "redis" {
		t.Errorf("store kind = %q, want redis: replicas must share their keys", cfg.Store.Kind)
	}

	// The Redis URL carries a password, so it must come from a Secret.
	i := slices.IndexFunc(proxyC.Env, func(e envVar) bool { return e.Name == redisURLEnv })
	if i < 0 || proxyC.Env[i].ValueFrom.SecretKeyRef.Name == "" {
		t.Errorf("proxy container does not set %s from a secretKeyRef", redisURLEnv)
	}

	// The ConfigMap is mounted as a directory: subPath mounts never update,
	// and the proxy reloads only when the file changes.
	spec := objs["Deployment"].Spec.Template.Spec
	var mounted bool
	for _, vm := range proxyC.VolumeMounts {
		vi := slices.IndexFunc(spec.Volumes, func(v volume) bool { return v.Name == vm.Name })
		if vi < 0 || spec.Volumes[vi].ConfigMap.Name != cm.Metadata.Name {
			continue
		}
		mounted = true
		if vm.MountPath != configMountDir || vm.SubPath != "" {
			t.Errorf("ConfigMap mounted at %q subPath %q, want directory %s without subPath", vm.MountPath, vm.SubPath, configMountDir)
		}
	}
	if !mounted {
		t.Errorf("ConfigMap %s is not mounted into the proxy container", cm.Metadata.Name)
	}

	// SIGKILL must not come before the drain, and the settling of the
	// requests aborted after it, can finish.
	grace := time.Duration(spec.TerminationGracePeriodSeconds) * time.Second
	preStop := time.Duration(proxyC.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	if grace <= preStop+cfg.ShutdownTimeout+shutdownOverrun {
		t.Errorf("terminationGracePeriodSeconds = %v, want more than preStop %v + shutdown_timeout %v + %v",
			grace, preStop, cfg.ShutdownTimeout, shutdownOverrun)
	}
	// The application must outlive the proxy's drain: in-flight requests
	// still need their upstream.
	appStop := time.Duration(appC.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	if appStop < preStop+cfg.ShutdownTimeout {
		t.Errorf("application preStop = %v, want at least %v so it serves until the proxy has drained", appStop, preStop+cfg.ShutdownTimeout)
	}
	if appStop >= grace {
		t.Errorf("application preStop %v leaves it no time to stop within the %v grace period", appStop, grace)
	}
}

func TestSidecarHardening(t *testing.T) {
	proxyC, _ := deploymentContainers(t)
	sc := proxyC.SecurityContext
	isTrue := func(b *bool) bool { return b != nil && *b }

	if !isTrue(sc.RunAsNonRoot) || sc.RunAsUser == 0 {
		t.Errorf("runAsNonRoot = %v, runAsUser = %d, want a non-root user", sc.RunAsNonRoot, sc.RunAsUser)
	}
	if !isTrue(sc.ReadOnlyRootFilesystem) {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("capabilities.drop = %q, want [ALL]", sc.Capabilities.Drop)
	}
	for _, r := range []string{"cpu", "memory"} {
		if proxyC.Resources.Requests[r] == "" {
			t.Errorf("no %s request", r)
		}
	}
	if proxyC.Resources.Limits["memory"] == "" {
		t.Error("no memory limit")
	}
}
