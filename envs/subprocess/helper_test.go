package subprocess

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// helperImage is the image observation of the "image" action.
const helperImage = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR42mP4z8AAAAMBAQD3A0FDAAAAAElFTkSuQmCC"

// helperEnv marks the test binary started as an environment process.
const helperEnv = "TRAJFLOW_SUBPROCESS_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		helperMain()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helperCommand is the command line that runs this test binary as an
// environment process.
func helperCommand() ([]string, map[string]string) {
	// GORACE: a race-enabled binary otherwise sleeps 1s before exiting.
	return []string{os.Args[0]}, map[string]string{helperEnv: "1", "GORACE": "atexit_sleep_ms=0"}
}

// helperMain is a small environment that misbehaves on command: the step
// action's content picks the behaviour.
//
//	crash    exit with status 3 (after a stderr line)
//	hang     never answer
//	garbage  answer with a line that is not JSON
//	wrongid  answer with another request's id
//	partial  write half a line and exit
//	enverror answer {"error": "boom"}
//	environment answer an observation of role "environment"
//	image    answer an image observation; metric images_sent counts the
//	         image parts of the request
//	anything else: count the step; reward = steps so far; "done" terminates
//
// The state is {"steps": n}; metrics carry the process id.
func helperMain() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	pid := float64(os.Getpid())
	fmt.Fprintf(os.Stderr, "helper %d ready\n", os.Getpid())
	for in.Scan() {
		var req struct {
			ID     int64           `json:"id"`
			Op     string          `json:"op"`
			TrajID string          `json:"traj_id"`
			Task   map[string]any  `json:"task"`
			State  json.RawMessage `json:"state"`
			Action struct {
				Content string `json:"content"`
			} `json:"action"`
		}
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintf(os.Stderr, "bad request: %v\n", err)
			os.Exit(2)
		}
		var resp map[string]any
		switch req.Op {
		case "reset":
			resp = map[string]any{
				"observations": []any{map[string]any{"role": "user", "content": fmt.Sprintf("hello %v", req.Task["word"])}},
				"tools":        []any{map[string]any{"type": "function", "function": map[string]any{"name": "noop"}}},
				"state":        map[string]any{"steps": 0},
				"anchor":       map[string]any{"pos": 0},
			}
		case "step":
			switch req.Action.Content {
			case "crash":
				fmt.Fprintln(os.Stderr, "crashing on purpose")
				os.Exit(3)
			case "hang":
				time.Sleep(time.Hour)
			case "garbage":
				fmt.Fprintln(out, "this is not JSON")
				out.Flush()
				continue
			case "wrongid":
				fmt.Fprintf(out, `{"id": %d, "reward": 1}`+"\n", req.ID+1000)
				out.Flush()
				continue
			case "partial":
				fmt.Fprintf(out, `{"id": %d, "rew`, req.ID)
				out.Flush()
				os.Exit(0)
			case "enverror":
				resp = map[string]any{"error": "boom"}
			case "environment":
				// NeMo RL's observation role.
				resp = map[string]any{"observations": []any{map[string]any{"role": "environment", "content": "from the env"}}}
			case "image":
				// An image observation; the metric counts the image parts
				// of the messages it was sent, as OpenAI content parts.
				n := strings.Count(string(in.Bytes()), `{"type":"image_url","image_url":{"url":"data:image/png;base64,`)
				resp = map[string]any{
					"observations": []any{map[string]any{"role": "user", "content": []any{
						map[string]any{"type": "text", "text": "the board:"},
						map[string]any{"type": "image_url", "image_url": map[string]any{"url": helperImage}},
					}}},
					"metrics": map[string]any{"images_sent": float64(n)},
				}
			}
			if resp == nil {
				var st struct{ Steps int }
				if err := json.Unmarshal(req.State, &st); err != nil {
					resp = map[string]any{"error": "bad state: " + string(req.State)}
					break
				}
				st.Steps++
				resp = map[string]any{
					"observations": []any{map[string]any{"role": "user", "content": strings.Repeat("ok ", st.Steps)}},
					"reward":       float64(st.Steps),
					"terminated":   req.Action.Content == "done",
					"metrics":      map[string]any{"pid": pid},
					"stop":         []string{"</answer>"},
					"state":        map[string]any{"steps": st.Steps},
					"anchor":       fmt.Sprintf("at %d", st.Steps),
				}
				if req.Action.Content == "bad" {
					resp["is_action_valid"] = false
				}
			}
		default:
			resp = map[string]any{"error": "unknown op " + req.Op}
		}
		resp["id"] = req.ID
		b, _ := json.Marshal(resp)
		out.Write(append(b, '\n'))
		out.Flush()
	}
	if os.Getenv("HELPER_IGNORE_EOF") == "1" {
		time.Sleep(time.Hour)
	}
}
