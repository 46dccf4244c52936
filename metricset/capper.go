package metricset

import "strings"

// aliasFactor bounds a capper's raw-value cache relative to its cap: several
// raw values may sanitise to one label (case of long or dirty names), but an
// endless stream of distinct raw values must not grow memory without limit.
const aliasFactor = 4

// capper maps raw values to label values, admitting at most max distinct
// labels; later ones become other. It is not locked itself: get without
// create runs under the owner's read lock, get with create under its write
// lock.
type capper[K comparable] struct {
	max      int
	other    K
	clean    func(K) K // sanitise a raw value
	keep     func(K) K // copy a raw value before it is kept as a map key
	alias    map[K]K   // raw → label, at most aliasFactor*max entries
	admitted map[K]struct{}
}

func newCapper[K comparable](max int, other K, clean, keep func(K) K) capper[K] {
	return capper[K]{
		max:      max,
		other:    other,
		clean:    clean,
		keep:     keep,
		alias:    make(map[K]K),
		admitted: make(map[K]struct{}),
	}
}

// get returns raw's label. Without create it only consults the cache and
// reports false on a miss; with create (write lock held) it always answers.
func (c *capper[K]) get(raw K, create bool) (K, bool) {
	if l, ok := c.alias[raw]; ok {
		return l, true
	}
	if !create {
		var zero K
		return zero, false
	}
	l := c.clean(raw)
	if _, ok := c.admitted[l]; !ok {
		if len(c.admitted) >= c.max {
			l = c.other
		} else {
			c.admitted[l] = struct{}{}
		}
	}
	// Past the alias bound a raw value is re-sanitised on every call: slower,
	// but only a stream of ever-new names gets there.
	if len(c.alias) < aliasFactor*c.max {
		c.alias[c.keep(raw)] = l
	}
	return l, true
}

// modelVersion is a (model, version) pair, raw or as labels.
type modelVersion struct{ model, version string }

func cleanModelVersion(mv modelVersion) modelVersion {
	return modelVersion{SanitizeLabelValue(mv.model), SanitizeLabelValue(mv.version)}
}

func keepModelVersion(mv modelVersion) modelVersion {
	return modelVersion{strings.Clone(mv.model), strings.Clone(mv.version)}
}

func newStringCapper(max int) capper[string] {
	return newCapper(max, Other, SanitizeLabelValue, strings.Clone)
}

func newModelCapper(max int) capper[modelVersion] {
	return newCapper(max, modelVersion{Other, Other}, cleanModelVersion, keepModelVersion)
}
