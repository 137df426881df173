package serve_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trajflow/trajflow/serve"
	"github.com/trajflow/trajflow/serve/client"
)

// TestServeInputRunsOut: when the input runs out before a step fills, the
// waiting request gets a 503 saying why, and the groups committed are
// still served in smaller steps.
func TestServeInputRunsOut(t *testing.T) {
	s := start(t, testConfig(t, t.TempDir(), "source.limit=6"), serve.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := client.New(s.url, "")
	_, err := c.Next(ctx, 7, "")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || !strings.Contains(ce.Message, "input ran out") {
		t.Fatalf("7 groups of a 6-task input: %v, want a 503 saying the input ran out", err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ended == "" || st.QueuedGroups < 1 || st.QueuedGroups > 6 {
		t.Fatalf("status: %+v", st)
	}
	step, err := c.Next(ctx, st.QueuedGroups, client.FormatJSONL)
	if err != nil {
		t.Fatal(err)
	}
	if step.Groups != st.QueuedGroups {
		t.Fatalf("step of %d groups, want %d", step.Groups, st.QueuedGroups)
	}
}

// TestServeMetrics: with run.metrics_addr the service's gauges are on the
// run's Prometheus endpoint.
func TestServeMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := start(t, testConfig(t, t.TempDir(), "run.metrics_addr="+addr), serve.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := client.New(s.url, "")
	st, err := c.Next(ctx, 2, client.FormatParquet)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetPolicy(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := c.Pause(ctx, "keep"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", addr))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		"trajflow_serve_policy_version 5",
		"trajflow_serve_paused 1",
		`trajflow_serve_steps{state="leased"} 1`,
		"trajflow_serve_steps_served_total 1",
		"trajflow_serve_stale_groups 0",
		"trajflow_serve_stale_groups_requeued_total 0",
		"trajflow_serve_stale_share 0",
		"trajflow_serve_stale_alarm 0",
		"trajflow_rollouts_total",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q:\n%s", want, b)
		}
	}
	_ = st
}

// TestServeCallerGoesAway: a trainer that stops waiting is forgotten, and
// no group is lost: the next steps take every group committed.
func TestServeCallerGoesAway(t *testing.T) {
	s := start(t, testConfig(t, t.TempDir(), "source.limit=40"), serve.Options{})
	c := client.New(s.url, "")
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := c.Next(short, 500, "")
	cancelShort()
	if err == nil {
		t.Fatal("a step of 500 groups from 40 tasks")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	deadline := time.Now().Add(10 * time.Second)
	var st *client.Status
	for {
		if st, err = c.Status(ctx); err != nil {
			t.Fatal(err)
		}
		if len(st.Waiting) == 0 && st.Ended != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Everything kept is queued: one step takes it all.
	if st.QueuedGroups != st.GroupsKept || st.QueuedGroups == 0 {
		t.Fatalf("%d queued, %d kept", st.QueuedGroups, st.GroupsKept)
	}
	step, err := c.Next(ctx, st.QueuedGroups, client.FormatJSONL)
	if err != nil {
		t.Fatal(err)
	}
	if step.Groups != st.QueuedGroups {
		t.Fatalf("step of %d groups, want %d", step.Groups, st.QueuedGroups)
	}
}
