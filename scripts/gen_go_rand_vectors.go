// gen_go_rand_vectors prints test vectors that pin down Go's math/rand (v1) value
// streams, so that blis_simpy.rng.gomath can be checked bit for bit without Go in CI.
//
// Usage (from the repository root):
//
//	go run scripts/gen_go_rand_vectors.go > tests/rng/data/go_rand_vectors.json
//
// Floats are printed with strconv 'g' -1 (shortest round-trip form) as JSON strings,
// so that parsing them back yields the exact float64 Go produced. math.Exp on amd64
// depends on whether the CPU has FMA; the "exp" section records what this machine did.
package main

import (
	"encoding/json"
	"hash/fnv"
	"math"
	"math/rand"
	"os"
	"runtime"
	"strconv"
)

const (
	tokenVocab = 128000
	nSmall     = 50
	nLarge     = 2000
	pow2N      = 1024
	oddN       = 1000003
	hugeN      = 1<<40 + 3 // Intn takes the Int63n path above 2^31-1
	heavyRejN  = 1<<30 + 1 // Int31n rejects almost half of all raw draws
)

var seeds = []int64{42, 0, 1, -7, 89482311, 1<<31 - 1, 1<<40 + 5, math.MinInt64}

var names = []string{"workload", "workload-gen", "router", "instance_0"}

func fmtF(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func draw[T any](n int, f func() T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = f()
	}
	return out
}

func floats(n int, f func() float64) []string {
	return draw(n, func() string { return fmtF(f()) })
}

func newRand(seed int64) *rand.Rand { return rand.New(rand.NewSource(seed)) }

// seedVectors returns the per-seed sequences; each sequence starts from a fresh source.
func seedVectors(seed int64, n int) map[string]any {
	r := func() *rand.Rand { return newRand(seed) }
	a, b, c, d, e, f, g, h, k, m := r(), r(), r(), r(), r(), r(), r(), r(), r(), r()
	return map[string]any{
		"seed":         seed,
		"int63":        draw(nSmall, a.Int63),
		"uint32":       draw(nSmall, b.Uint32),
		"int31":        draw(nSmall, c.Int31),
		"intn_128000":  draw(n, func() int { return d.Intn(tokenVocab) }),
		"int31n_pow2":  draw(nSmall, func() int32 { return e.Int31n(pow2N) }),
		"int31n_odd":   draw(nSmall, func() int32 { return f.Int31n(oddN) }),
		"intn_huge":    draw(nSmall, func() int { return k.Intn(hugeN) }),
		"intn_heavy":   draw(nSmall, func() int { return m.Intn(heavyRejN) }),
		"float64":      floats(nSmall, g.Float64),
		"norm_float64": floats(n, h.NormFloat64),
	}
}

// interleaved mimics a workload generator: per request a normal input length,
// that many token ids, then a normal output length.
func interleaved(seed int64, requests int) []map[string]any {
	r := newRand(seed)
	out := make([]map[string]any, 0, requests)
	for i := 0; i < requests; i++ {
		inNorm := r.NormFloat64()
		inLen := int(math.Max(1, math.Min(200, math.Round(inNorm*40+60))))
		tokens := draw(inLen, func() int { return r.Intn(tokenVocab) })
		outNorm := r.NormFloat64()
		out = append(out, map[string]any{
			"in_norm": fmtF(inNorm), "in_len": inLen, "tokens": tokens, "out_norm": fmtF(outNorm),
		})
	}
	return out
}

// firstRejection finds the first raw Int31 draw that Intn(tokenVocab) rejects and
// returns the Intn results around it, so the bulk path is checked across a rejection.
func firstRejection(seed int64) map[string]any {
	limit := int32((1<<31 - 1) - (1<<31)%uint32(tokenVocab))
	raw := newRand(seed)
	idx := 0
	for raw.Int31() <= limit {
		idx++
	}
	r := newRand(seed)
	start := idx - 5
	for i := 0; i < start; i++ {
		r.Intn(tokenVocab)
	}
	return map[string]any{
		"seed": seed, "n": tokenVocab, "raw_index": idx, "start_call": start,
		"values": draw(10, func() int { return r.Intn(tokenVocab) }),
	}
}

// normTail records NormFloat64 results around the first few draws that took the
// base-strip tail path (|x| > rn), which the plain sequences may never reach.
func normTail(seed int64, hits int) map[string]any {
	r := newRand(seed)
	found := []map[string]any{}
	prev := r.NormFloat64()
	for i := 1; len(found) < hits; i++ {
		v := r.NormFloat64()
		if math.Abs(v) > 3.442619855899 {
			next := r.NormFloat64()
			found = append(found, map[string]any{"index": i, "values": []string{fmtF(prev), fmtF(v), fmtF(next)}})
			i++
			v = next
		}
		prev = v
	}
	return map[string]any{"seed": seed, "hits": found}
}

func fnvVectors() []map[string]any {
	out := []map[string]any{}
	for _, name := range names {
		h := fnv.New64a()
		h.Write([]byte(name))
		sum := h.Sum64()
		derived := map[string]int64{}
		for _, s := range seeds {
			derived[strconv.FormatInt(s, 10)] = s ^ int64(sum)
		}
		out = append(out, map[string]any{"name": name, "fnv1a64": sum, "derived": derived})
	}
	return out
}

// mathVectors pins math.Log and math.Exp on the inputs NormFloat64 feeds them,
// because on amd64 both are assembly routines that are not correctly rounded.
func mathVectors() map[string]any {
	r := newRand(7)
	logIn := floats(300, r.Float64)
	logOut := make([]string, len(logIn))
	for i, s := range logIn {
		v, _ := strconv.ParseFloat(s, 64)
		logOut[i] = fmtF(math.Log(v))
	}
	expIn := make([]string, 300)
	expOut := make([]string, 300)
	for i := range expIn {
		x := r.Float64() * 3.5
		v := -.5 * x * x
		expIn[i], expOut[i] = fmtF(v), fmtF(math.Exp(v))
	}
	return map[string]any{
		"log_in": logIn, "log_out": logOut, "exp_in": expIn, "exp_out": expOut,
		"inv_rn": fmtF(1.0 / 3.442619855899),
	}
}

func main() {
	perSeed := []map[string]any{}
	for i, s := range seeds {
		n := nSmall
		if i == 0 {
			n = nLarge
		}
		perSeed = append(perSeed, seedVectors(s, n))
	}
	doc := map[string]any{
		"go_version":      runtime.Version(),
		"goarch":          runtime.GOARCH,
		"seeds":           perSeed,
		"interleaved":     map[string]any{"seed": 42, "requests": interleaved(42, 30)},
		"first_rejection": firstRejection(42),
		"norm_tail":       normTail(42, 4),
		"fnv":             fnvVectors(),
		"math":            mathVectors(),
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(doc); err != nil {
		panic(err)
	}
}
