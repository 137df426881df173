package openai

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// TestPriorityField sends requests with a priority to a vLLM-shaped
// server and checks the body's priority field as sent: present under
// generate.priority: auto, absent under off, and dropped for good once a
// server refuses it with vLLM's message (its default FCFS policy) or
// OpenAI's (an unknown argument), the refused request sent again without
// it.
func TestPriorityField(t *testing.T) {
	const vllmRefusal = "Got priority 3 but Priority scheduling is not enabled."
	const openaiRefusal = "Unrecognized request argument supplied: priority"
	for _, tc := range []struct {
		name   string
		mode   string
		refuse string // the 400 message of a server refusing priorities; "" accepts
		// want is the body's priority per request received, nil: absent.
		want []any
	}{
		{name: "auto sends it", mode: "auto", want: []any{float64(3), float64(0), float64(7)}},
		{name: "empty mode is auto", mode: "", want: []any{float64(3), float64(0), float64(7)}},
		{name: "off sends none", mode: "off", want: []any{nil, nil, nil}},
		{name: "vLLM without the priority policy", mode: "auto", refuse: vllmRefusal, want: []any{float64(3), nil, nil, nil}},
		{name: "a hosted API", mode: "auto", refuse: openaiRefusal, want: []any{float64(3), nil, nil, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var srv *server
			srv = newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if _, has := srv.body(n)["priority"]; has && tc.refuse != "" {
					w.WriteHeader(http.StatusBadRequest)
					fmt.Fprintf(w, `{"object":"error","message":%q,"type":"BadRequestError","param":null,"code":400}`, tc.refuse)
					return
				}
				io.WriteString(w, okBody)
			})
			cfg := testConfig(srv.URL + "/v1")
			cfg.Priority = tc.mode
			c := newClient(t, cfg, HTTPOptions{})
			for _, p := range []int{3, 0, 7} {
				req := userReq("hi")
				req.Priority = &p
				if _, err := c.Complete(context.Background(), req); err != nil {
					t.Fatalf("priority %d: %v", p, err)
				}
			}
			if got := int(srv.calls.Load()); got != len(tc.want) {
				t.Fatalf("%d requests reached the server, want %d", got, len(tc.want))
			}
			for i, want := range tc.want {
				got, has := srv.body(i)["priority"]
				if want == nil && has || want != nil && got != want {
					t.Errorf("request %d: priority %v (present %v), want %v", i, got, has, want)
				}
			}
		})
	}
}

// TestPriorityRequestWithout: a request without a priority sends no field.
func TestPriorityRequestWithout(t *testing.T) {
	srv := newServer(t, nil)
	c := newClient(t, testConfig(srv.URL+"/v1"), HTTPOptions{})
	if _, err := c.Complete(context.Background(), userReq("hi")); err != nil {
		t.Fatal(err)
	}
	if _, has := srv.body(0)["priority"]; has {
		t.Errorf("body %v carries a priority", srv.body(0))
	}
}
