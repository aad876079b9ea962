// gen_go_heap_vectors prints test vectors that pin down the order in which Go's
// container/heap returns events keyed on a timestamp alone (the reference's per-instance
// event queue), so that blis_simpy.engine.goheap can be checked without Go in CI.
//
// Usage (from the repository root):
//
//	go run scripts/gen_go_heap_vectors.go > tests/engine/data/go_heap_vectors.json
//
// Each case is a sequence of operations: [t, id] pushes event id at time t, [] pops one.
// "popped" lists the ids in the order the pops returned them. Times are drawn from a few
// values so that most comparisons are ties.
package main

import (
	"container/heap"
	"encoding/json"
	"math/rand"
	"os"
)

type event struct{ t, id int }
type events []event

func (h events) Len() int           { return len(h) }
func (h events) Less(i, j int) bool { return h[i].t < h[j].t }
func (h events) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)        { *h = append(*h, x.(event)) }
func (h *events) Pop() any {
	old := *h
	n := len(old)
	x := old[n-1]
	*h = old[:n-1]
	return x
}

type testCase struct {
	Ops    [][]int `json:"ops"`
	Popped []int   `json:"popped"`
}

func main() {
	r := rand.New(rand.NewSource(1))
	var cases []testCase
	for c := 0; c < 40; c++ {
		var h events
		var tc testCase
		clock, id := 0, 0
		for k := 0; k < 30+r.Intn(120); k++ {
			if h.Len() > 0 && r.Intn(3) == 0 {
				e := heap.Pop(&h).(event)
				clock = e.t
				tc.Ops = append(tc.Ops, []int{})
				tc.Popped = append(tc.Popped, e.id)
				continue
			}
			t := clock + r.Intn(1+c%4)
			heap.Push(&h, event{t, id})
			tc.Ops = append(tc.Ops, []int{t, id})
			id++
		}
		for h.Len() > 0 {
			e := heap.Pop(&h).(event)
			tc.Ops = append(tc.Ops, []int{})
			tc.Popped = append(tc.Popped, e.id)
		}
		cases = append(cases, tc)
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(cases); err != nil {
		panic(err)
	}
}
