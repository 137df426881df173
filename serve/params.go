package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/trajflow/trajflow/serve/client"
	"github.com/trajflow/trajflow/stages/generate"
)

// StepQuery is a parsed GET /v1/steps/next query. World is 0 for a step
// served whole; else the step is cut into World slices and Rank's is
// served.
type StepQuery struct {
	Groups      int
	Format      string
	Rank, World int
}

// ParseRank parses the rank and world query parameters (both or
// neither): world from 1 to MaxWorld, rank from 0 to world-1. Neither:
// 0, 0. The error names the parameter and repeats no value.
func ParseRank(q map[string][]string) (rank, world int, perr *ParamError) {
	rs, hasRank := q["rank"]
	ws, hasWorld := q["world"]
	switch {
	case !hasRank && !hasWorld:
		return 0, 0, nil
	case !hasWorld:
		return 0, 0, &ParamError{"world", "world=W is required with rank (the number of data-parallel ranks)"}
	case !hasRank:
		return 0, 0, &ParamError{"rank", "rank=R is required with world (this rank, 0 to world-1)"}
	case len(ws) != 1:
		return 0, 0, &ParamError{"world", "world given more than once"}
	case len(rs) != 1:
		return 0, 0, &ParamError{"rank", "rank given more than once"}
	}
	world, err := strconv.Atoi(ws[0])
	if err != nil || world < 1 || world > MaxWorld {
		return 0, 0, &ParamError{"world", fmt.Sprintf("world: want an integer from 1 to %d", MaxWorld)}
	}
	rank, err = strconv.Atoi(rs[0])
	if err != nil || rank < 0 || rank >= world {
		return 0, 0, &ParamError{"rank", "rank: want an integer from 0 to world-1"}
	}
	return rank, world, nil
}

// ParseStepQuery parses the query of GET /v1/steps/next: groups (1 to
// maxGroups), format (arrow, the default, parquet or jsonl), and rank and
// world (ParseRank; world at most groups, the format arrow or jsonl). The
// error names the parameter.
func ParseStepQuery(q map[string][]string, maxGroups int) (StepQuery, *ParamError) {
	out := StepQuery{Format: FormatArrow}
	for k := range q {
		if k != "groups" && k != "format" && k != "rank" && k != "world" {
			return out, &ParamError{paramName(k), "unknown parameter: want groups, format, rank and world"}
		}
	}
	gs := q["groups"]
	if len(gs) != 1 {
		return out, &ParamError{"groups", "groups=K is required, once"}
	}
	k, err := strconv.Atoi(gs[0])
	if err != nil || k <= 0 || k > maxGroups {
		return out, &ParamError{"groups", fmt.Sprintf("groups: want an integer from 1 to %d (serve.max_groups_per_step)", maxGroups)}
	}
	out.Groups = k
	if fs, ok := q["format"]; ok {
		if len(fs) != 1 {
			return out, &ParamError{"format", "format given more than once"}
		}
		if _, ok := contentTypes[fs[0]]; !ok {
			return out, &ParamError{"format", "format: want arrow, parquet or jsonl"}
		}
		out.Format = fs[0]
	}
	var perr *ParamError
	if out.Rank, out.World, perr = ParseRank(q); perr != nil {
		return out, perr
	}
	if out.World > out.Groups {
		return out, &ParamError{"world", "world: at most groups (every rank's slice holds whole groups, one at least)"}
	}
	if out.World > 0 && out.Format == FormatParquet {
		return out, &ParamError{"format", "format parquet serves whole steps: a rank's slice is arrow or jsonl"}
	}
	return out, nil
}

// paramName is an unknown query parameter's name as an error names it:
// "query" for one without a name.
func paramName(k string) string {
	if k == "" {
		return "query"
	}
	return k
}

// ParamError is a bad request parameter.
type ParamError struct {
	Param, Msg string
}

func (e *ParamError) Error() string { return e.Msg }

// PolicyBody is the body of POST /v1/policy.
type PolicyBody struct {
	Version *int64 `json:"version"`
}

// ParsePolicyBody parses the body of POST /v1/policy: {"version": v},
// v >= 0. The error names the parameter (the field, for a value of the
// wrong type) and repeats no value.
func ParsePolicyBody(b []byte) (int64, *ParamError) {
	const want = `want a JSON object {"version": N}, N a whole number >= 0`
	var body PolicyBody
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return 0, bodyError(err, want)
	}
	if dec.More() {
		return 0, &ParamError{"body", "more than one JSON value: " + want}
	}
	if body.Version == nil {
		return 0, &ParamError{"version", "version is required: " + want}
	}
	if *body.Version < 0 {
		return 0, &ParamError{"version", "version: must be >= 0"}
	}
	return *body.Version, nil
}

// bodyError is the ParamError of a JSON body that did not decode: a
// field of the wrong type names the field, an unknown field the body;
// neither says a Go type or repeats a value. want says what the body
// should be.
func bodyError(err error, want string) *ParamError {
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) && typ.Field != "" {
		kind, _, _ := strings.Cut(typ.Value, " ") // "number 1.5": the kind alone
		if kind == "bool" {
			kind = "boolean"
		}
		return &ParamError{typ.Field, fmt.Sprintf("%s: a JSON %s of the wrong type: %s", typ.Field, kind, want)}
	}
	if strings.HasPrefix(err.Error(), "json: unknown field ") {
		return &ParamError{"body", "an unknown field: " + want}
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return &ParamError{"body", fmt.Sprintf("not JSON (at byte %d): %s", syn.Offset, want)}
	}
	return &ParamError{"body", "not a JSON object: " + want}
}

// ParsePauseMode reads the pause mode of POST /v1/pause from the query
// (mode=) or the body ({"mode": "..."}); def when neither names one. The
// query may also hold by (see ParseBy).
func ParsePauseMode(query map[string][]string, body []byte, def generate.PauseMode) (generate.PauseMode, *ParamError) {
	mode := def
	for k := range query {
		if k != "mode" && k != "by" {
			return "", &ParamError{paramName(k), "unknown parameter: want mode and by"}
		}
	}
	if ms, ok := query["mode"]; ok {
		if len(ms) != 1 {
			return "", &ParamError{"mode", "mode given more than once"}
		}
		mode = generate.PauseMode(ms[0])
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		var b struct {
			Mode *string `json:"mode"`
		}
		const want = `want a JSON object {"mode": "abort"|"keep"} or no body`
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&b); err != nil {
			return "", bodyError(err, want)
		}
		if dec.More() {
			return "", &ParamError{"body", "more than one JSON value: " + want}
		}
		if b.Mode != nil {
			mode = generate.PauseMode(*b.Mode)
		}
	}
	if mode != generate.PauseAbort && mode != generate.PauseKeep {
		return "", &ParamError{"mode", "mode: want abort or keep"}
	}
	return mode, nil
}

// ParseBy reads who asks for a pause: the query's by, else the
// Trajflow-Client header (client.HeaderClient), else remote (the
// request's address). by is at most MaxBy bytes of printable UTF-8; the
// error names the parameter or header and never repeats the value.
func ParseBy(query map[string][]string, header http.Header, remote string) (string, *ParamError) {
	name, by := "by", ""
	if bs, ok := query["by"]; ok {
		if len(bs) != 1 {
			return "", &ParamError{"by", "by given more than once"}
		}
		by = bs[0]
	} else if v := header.Get(client.HeaderClient); v != "" {
		name, by = client.HeaderClient, v
	} else {
		return remote, nil
	}
	if by == "" || len(by) > MaxBy || !utf8.ValidString(by) || strings.IndexFunc(by, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return "", &ParamError{name, fmt.Sprintf("%s: want 1 to %d bytes of printable UTF-8 (a trainer's name or rank)", name, MaxBy)}
	}
	return by, nil
}
