package serve_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/serve"
	"github.com/trajflow/trajflow/stages/generate"
)

func TestParseStepQuery(t *testing.T) {
	for _, tc := range []struct {
		query  string
		groups int
		format string
		param  string
	}{
		{"groups=8", 8, "arrow", ""},
		{"groups=8&format=parquet", 8, "parquet", ""},
		{"groups=1&format=jsonl", 1, "jsonl", ""},
		{"groups=64", 64, "arrow", ""},
		{"groups=65", 0, "", "groups"},
		{"groups=0", 0, "", "groups"},
		{"groups=-1", 0, "", "groups"},
		{"groups=1e3", 0, "", "groups"},
		{"groups=8&groups=9", 0, "", "groups"},
		{"", 0, "", "groups"},
		{"groups=8&format=xml", 0, "", "format"},
		{"groups=8&format=", 0, "", "format"},
		{"groups=8&format=arrow&format=jsonl", 0, "", "format"},
		{"groups=8&token=x", 0, "", "token"},
	} {
		q, _ := url.ParseQuery(tc.query)
		got, err := serve.ParseStepQuery(q, 64)
		switch {
		case tc.param != "":
			if err == nil || err.Param != tc.param || err.Msg == "" {
				t.Errorf("%q: %+v, %v; want an error naming %s", tc.query, got, err, tc.param)
			}
		case err != nil || got.Groups != tc.groups || got.Format != tc.format:
			t.Errorf("%q: %+v, %v; want %d %s", tc.query, got, err, tc.groups, tc.format)
		}
	}
}

func TestParsePolicyBody(t *testing.T) {
	for _, tc := range []struct {
		body  string
		v     int64
		param string
	}{
		{`{"version": 2}`, 2, ""},
		{`{"version": 0}`, 0, ""},
		{`{"version": -1}`, 0, "version"},
		{`{}`, 0, "version"},
		{`{"version": "2"}`, 0, "version"}, // the wrong type names the field
		{`{"version": 2, "x": 1}`, 0, "body"},
		{`{"version": 2}{"version": 3}`, 0, "body"},
		{`[2]`, 0, "body"},
		{``, 0, "body"},
		{`{"version": 1.5}`, 0, "version"},
		{`{"version": 2.5}`, 0, "version"},
		{`{"version": true}`, 0, "version"},
		{`{"version": 99999999999999999999}`, 0, "version"},
		{`{"version": `, 0, "body"},
	} {
		v, err := serve.ParsePolicyBody([]byte(tc.body))
		switch {
		case tc.param != "":
			if err == nil || err.Param != tc.param {
				t.Errorf("%q: %d, %v; want an error naming %s", tc.body, v, err, tc.param)
			} else if goTypes.MatchString(err.Msg) {
				t.Errorf("%q: %q speaks of Go types", tc.body, err.Msg)
			}
		case err != nil || v != tc.v:
			t.Errorf("%q: %d, %v; want %d", tc.body, v, err, tc.v)
		}
	}
}

func TestParsePauseMode(t *testing.T) {
	for _, tc := range []struct {
		query, body string
		mode        generate.PauseMode
		param       string
	}{
		{"", "", "abort", ""},
		{"mode=keep", "", "keep", ""},
		{"", `{"mode": "keep"}`, "keep", ""},
		{"", `{}`, "abort", ""},
		{"mode=abort", `{"mode": "keep"}`, "keep", ""},
		{"mode=stop", "", "", "mode"},
		{"", `{"mode": "stop"}`, "", "mode"},
		{"", `{"mode": 1}`, "", "mode"}, // the wrong type names the field
		{"", `{"mode": ["keep"]}`, "", "mode"},
		{"", `{"mode": "keep"} {}`, "", "body"},
		{"", `{"mode"`, "", "body"},
		{"", `{"how": "keep"}`, "", "body"},
		{"why=1", "", "", "why"},
		{"mode=keep&mode=abort", "", "", "mode"},
	} {
		q, _ := url.ParseQuery(tc.query)
		m, err := serve.ParsePauseMode(q, []byte(tc.body), generate.PauseAbort)
		switch {
		case tc.param != "":
			if err == nil || err.Param != tc.param {
				t.Errorf("%q %q: %q, %v; want an error naming %s", tc.query, tc.body, m, err, tc.param)
			} else if goTypes.MatchString(err.Msg) {
				t.Errorf("%q %q: %q speaks of Go types", tc.query, tc.body, err.Msg)
			}
		case err != nil || m != tc.mode:
			t.Errorf("%q %q: %q, %v; want %s", tc.query, tc.body, m, err, tc.mode)
		}
	}
}

// goTypes matches what a JSON decoder's error says of Go: its type names.
var goTypes = regexp.MustCompile(`\b(int64|int32|int|bool|float64|struct|Go|PolicyBody)\b|json:`)

// secret stands for a value that must never be repeated in an error (the
// bearer token sent as a parameter by mistake, say).
const secret = "s3cr3t-Token-0123456789"

// TestErrorsRepeatNoValue: no parser's error repeats a value it was given,
// whatever the parameter.
func TestErrorsRepeatNoValue(t *testing.T) {
	for _, query := range []string{
		"groups=" + secret, "groups=8&format=" + secret, "groups=8&groups=" + secret,
	} {
		q, _ := url.ParseQuery(query)
		if _, err := serve.ParseStepQuery(q, 64); err == nil || strings.Contains(err.Msg, secret) {
			t.Errorf("step query %q: %v", query, err)
		}
	}
	for _, body := range []string{
		`{"version": "` + secret + `"}`, `{"` + secret + `x": 1}`, `{"version": 1, "v": "` + secret + `"}`, secret,
	} {
		if _, err := serve.ParsePolicyBody([]byte(body)); err == nil || strings.Contains(err.Msg, secret) {
			t.Errorf("policy body %q: %v", body, err)
		}
	}
	for _, tc := range []struct{ query, body string }{
		{"mode=" + secret, ""}, {"", `{"mode": "` + secret + `"}`}, {"", secret},
	} {
		q, _ := url.ParseQuery(tc.query)
		if _, err := serve.ParsePauseMode(q, []byte(tc.body), generate.PauseAbort); err == nil || strings.Contains(err.Msg, secret) {
			t.Errorf("pause %q %q: %v", tc.query, tc.body, err)
		}
	}
	q, _ := url.ParseQuery("by=" + secret + "%00")
	if _, err := serve.ParseBy(q, http.Header{}, ""); err == nil || strings.Contains(err.Msg, secret) {
		t.Errorf("by: %v", err)
	}
}

// TestParseBy: who pauses is the query's by, else the Trajflow-Client
// header, else the caller's address; 1 to MaxBy printable characters.
func TestParseBy(t *testing.T) {
	for _, tc := range []struct {
		query, header, want, param string
	}{
		{"by=rank-3", "", "rank-3", ""},
		{"by=rank-3", "host:1", "rank-3", ""},
		{"", "host:1", "host:1", ""},
		{"", "", "10.0.0.1:5000", ""},
		{"by=", "", "", "by"},
		{"by=a&by=b", "", "", "by"},
		{"by=" + strings.Repeat("x", serve.MaxBy+1), "", "", "by"},
		{"by=a%0Ab", "", "", "by"},
		{"by=%ff", "", "", "by"},
		{"", "a\x01b", "", "Trajflow-Client"},
	} {
		q, _ := url.ParseQuery(tc.query)
		h := http.Header{}
		if tc.header != "" {
			h.Set("Trajflow-Client", tc.header)
		}
		got, err := serve.ParseBy(q, h, "10.0.0.1:5000")
		switch {
		case tc.param != "":
			if err == nil || err.Param != tc.param {
				t.Errorf("%q %q: %q, %v; want an error naming %s", tc.query, tc.header, got, err, tc.param)
			}
		case err != nil || got != tc.want:
			t.Errorf("%q %q: %q, %v; want %q", tc.query, tc.header, got, err, tc.want)
		}
	}
}

// The parsers never panic and either accept a valid request or name a
// parameter.
func FuzzParseStepQuery(f *testing.F) {
	for _, s := range []string{"groups=8", "groups=8&format=parquet", "groups=0", "format=xml", "groups=%zz", "groups=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		got, perr := serve.ParseStepQuery(q, 4096)
		if perr != nil {
			if perr.Param == "" || perr.Msg == "" {
				t.Fatalf("%q: an error naming nothing: %+v", raw, perr)
			}
			return
		}
		if got.Groups < 1 || got.Groups > 4096 || (got.Format != "arrow" && got.Format != "parquet" && got.Format != "jsonl") {
			t.Fatalf("%q: accepted %+v", raw, got)
		}
	})
}

func FuzzParsePolicyBody(f *testing.F) {
	for _, s := range []string{`{"version": 2}`, `{}`, `{"version": -1}`, `null`, `{"version": 1e400}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, perr := serve.ParsePolicyBody(b)
		if perr != nil {
			if perr.Param == "" || perr.Msg == "" {
				t.Fatalf("%q: an error naming nothing: %+v", b, perr)
			}
			return
		}
		if v < 0 {
			t.Fatalf("%q: accepted version %d", b, v)
		}
	})
}

func FuzzParsePauseMode(f *testing.F) {
	f.Add("mode=keep", []byte(``))
	f.Add("", []byte(`{"mode": "abort"}`))
	f.Add("mode=x", []byte(`{"mode": 3}`))
	f.Fuzz(func(t *testing.T, raw string, body []byte) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		m, perr := serve.ParsePauseMode(q, body, generate.PauseKeep)
		if perr != nil {
			if perr.Param == "" || perr.Msg == "" {
				t.Fatalf("an error naming nothing: %+v", perr)
			}
			return
		}
		if m != generate.PauseAbort && m != generate.PauseKeep {
			t.Fatalf("accepted mode %q", m)
		}
		if strings.TrimSpace(string(body)) == "" && len(q) == 0 && m != generate.PauseKeep {
			t.Fatalf("no mode given: %q, want the default", m)
		}
	})
}
