package main

// A step is where a request's walk is after one event: in the function
// entered, or, after a return, in the function returned to. A step whose
// file is empty is outside the module's instrumented files (the standard
// library, a dependency, walkrun): there the walk is still where it was.
type step struct {
	goroutine int64
	file, fn  string
}

// A walk is a request's path through the source files, as a reader
// follows it: a stay is a maximal stretch in one file, a return a stay in a
// file the walk was in before, so that stays = files + returns.
type walk struct {
	stays   []step // the first step of each stay
	returns []bool // whether each stay is a return
	files   int    // distinct files
}

// returnCount is the number of stays in a file visited before.
func (w walk) returnCount() int { return len(w.stays) - w.files }

// count follows steps, in the order they ran, through the files.
func count(steps []step) walk {
	var w walk
	seen := map[string]bool{}
	for _, s := range steps {
		if s.file == "" {
			continue
		}
		if n := len(w.stays); n > 0 && w.stays[n-1].file == s.file {
			continue
		}
		w.stays = append(w.stays, s)
		w.returns = append(w.returns, seen[s.file])
		seen[s.file] = true
	}
	w.files = len(seen)
	return w
}
