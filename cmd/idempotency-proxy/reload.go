package main

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/idempotency-proxy/idempotency-proxy/admin"
	"github.com/idempotency-proxy/idempotency-proxy/config"
	"github.com/idempotency-proxy/idempotency-proxy/proxy"
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/seal"
)

// settle is how long file events are coalesced before a reload: editors and
// Kubernetes ConfigMap updates write a file in several steps.
const settle = 100 * time.Millisecond

// reloader applies configuration changes while the proxy runs: routes,
// policies and the log level change for new requests; everything else
// needs a restart and is logged as such. An invalid file is logged and the
// running configuration stays.
type reloader struct {
	src     config.Source
	file    string // the file in use, also when named by IDEMPOTENCY_PROXY_CONFIG
	handler *proxy.Handler
	token   *admin.Token      // the admin API's, re-read from admin.token_file
	sealer  *seal.Store       // its keyring re-read from store.encryption.keys_file
	tombs   *store.Tombstones // looks for tombstones while a route rejects expired keys
	level   *slog.LevelVar
	log     *slog.Logger
	metrics *admin.Metrics // counts reloads applied and rejected

	// started is the configuration the process started with: listeners,
	// upstream and store keep its values until a restart.
	started *config.Config

	mu      sync.Mutex
	current *config.Config
}

func (r *reloader) config() *config.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current
}

// view is the running configuration as GET /admin/config shows it.
func (r *reloader) view() []byte {
	return r.config().View(r.started)
}

// startWatching begins to watch the config and keys files, as soon as the
// configuration was read: an edit made while the proxy is still starting
// (its store being prepared) is then seen once run begins, where a watch
// begun when the proxy serves would miss it and leave the edit out until
// the next one. nil when they cannot be watched (logged; SIGHUP still
// reloads) or there is no file. The caller closes it.
func (r *reloader) startWatching() *fsnotify.Watcher {
	files := r.watched()
	if len(files) == 0 {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = r.watch(w)
	}
	if err != nil {
		r.log.Warn("cannot watch the config and keys files; reload with SIGHUP", "files", files, "error", err)
		if w != nil {
			w.Close()
		}
		return nil
	}
	return w
}

// run reloads on each signal hup delivers and on each change of a file w
// watches (startWatching; nil: signals only), until ctx ends.
func (r *reloader) run(ctx context.Context, hup <-chan os.Signal, w *fsnotify.Watcher) {
	var events <-chan fsnotify.Event
	var watchErrors <-chan error
	if w != nil {
		events, watchErrors = w.Events, w.Errors
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	reload := func(trigger string) {
		before := r.watched()
		r.reload(trigger)
		if w == nil {
			return
		}
		// A keys file the reload named (encryption turned on, the file
		// moved) is watched from then on.
		if err := r.watch(w); err != nil {
			r.log.Warn("cannot watch the config and keys files; reload with SIGHUP", "files", r.watched(), "error", err)
			return
		}
		if !slices.Equal(before, r.watched()) {
			// A rotation written to it after the reload read it and
			// before the watch began raised no event: read it again,
			// now that one would.
			timer.Reset(settle)
		}
	}

	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			reload("sighup")
		case ev := <-events:
			if r.concerns(ev) {
				timer.Reset(settle)
			}
		case err := <-watchErrors:
			r.log.Warn("config file watch error", "error", err)
		case <-timer.C:
			reload("file_changed")
		}
	}
}

// watch has w watch the directories of the watched files: editors,
// ConfigMap and Secret volumes replace a file (rename, symlink swap) rather
// than write it. It watches each file too, as it is now (through a symlink,
// the file it leads to): a file written in place through another path — a
// symlink's target edited in its own directory, a file bind-mounted into a
// container and edited on the host — raises its events in that path's
// directory, but also on the file. A file replaced since is watched again
// by the next call, which every reload makes. A directory or file already
// watched stays so.
func (r *reloader) watch(w *fsnotify.Watcher) error {
	for _, f := range r.watched() {
		if err := w.Add(filepath.Dir(f)); err != nil {
			return err
		}
		// One missing now is seen in its directory when it is created.
		if err := w.Add(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// watched are the files whose change reloads: the config file and the
// encryption keys file in force.
func (r *reloader) watched() []string {
	var files []string
	for _, f := range []string{r.file, r.config().Store.Encryption.KeysFile} {
		if f != "" {
			files = append(files, f)
		}
	}
	return files
}

// concerns reports whether an event in a watched directory may have
// changed a watched file.
func (r *reloader) concerns(ev fsnotify.Event) bool {
	if ev.Has(fsnotify.Chmod) && !ev.Has(fsnotify.Write) {
		return false
	}
	name := filepath.Base(ev.Name)
	if name == "..data" { // Kubernetes ConfigMap or Secret swap
		return true
	}
	for _, f := range r.watched() {
		if name == filepath.Base(f) {
			return true
		}
	}
	return false
}

func (r *reloader) reload(trigger string) {
	next, err := config.Load(r.src)
	if err != nil {
		r.rejected(trigger, err.Error())
		return
	}
	if next.FileEmpty() && !r.config().FileEmpty() {
		// A file being rewritten can be read empty in between, and read
		// as "every key at its default" it would drop every route.
		r.rejected(trigger, r.file+": holds no configuration (empty, or every line a comment): write the configuration again, or restart to run on the defaults")
		return
	}
	def, routes := policies(next)
	if err := r.handler.SetRoutes(def, routes); err != nil {
		r.rejected(trigger, err.Error())
		return
	}
	if r.tombs != nil {
		r.tombs.Check(rejectsExpired(next))
	}
	r.level.Set(next.LogLevel.Level())
	r.handler.SetAccessLog(next.AccessLog)
	if err := r.handler.SetAccessLogFormat(next.AccessLogFields, config.Prefixes(next.TrustedProxies)); err != nil {
		// Load has checked both: only a Config built in code gets here.
		r.log.Error("access log fields not reloaded", "error", err.Error())
	}
	r.reloadToken(next.Admin)
	r.reloadKeyring(next.Store.Encryption.Keyring)
	if keys := next.RestartNeeded(r.started); len(keys) > 0 {
		r.log.Warn("config changes that need a restart were not applied", "keys", keys)
	}
	r.mu.Lock()
	prev := r.current
	r.current = next
	r.mu.Unlock()
	// What this reload changed, against the configuration before it;
	// restart says which of those wait for a restart, against the one
	// the process runs with.
	changes := next.Changes(prev, r.started)
	if changes == nil {
		changes = []config.Change{}
	}
	r.metrics.Reloaded(true)
	r.log.Info("config reloaded", "trigger", trigger, "file", r.file, "routes", len(next.Routes), "changes", changes)
}

// rejected logs a reload that changed nothing, and why, and counts it: the
// file in place is not the configuration in force until an edit applies.
func (r *reloader) rejected(trigger, problems string) {
	r.metrics.Reloaded(false)
	r.log.Error("config reload rejected; the previous configuration stays in force",
		"trigger", trigger, "file", r.file, "problems", problems)
}

// reloadToken applies admin.token or re-reads admin.token_file. A file that
// cannot be read keeps the token in force: locking operators out in the
// middle of an incident is worse than a stale token.
func (r *reloader) reloadToken(c config.Admin) {
	tok, err := adminToken(c)
	if err != nil {
		r.log.Error("admin token not reloaded; the previous token stays in force", "error", err)
		return
	}
	r.token.Set(tok)
}

// reloadKeyring puts the keys file as the reload read it in force. A keys
// file that did not load rejected the whole reload (config.Load), so the
// previous keys stay.
func (r *reloader) reloadKeyring(kr *seal.Keyring) {
	if r.sealer == nil {
		return
	}
	old := r.sealer.Keyring()
	r.sealer.SetKeyring(kr)
	if old.String() != kr.String() {
		r.log.Info("encryption keys reloaded", "encryption", kr)
	}
}
