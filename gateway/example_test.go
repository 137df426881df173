package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/trajflow/trajflow/gateway"
	"github.com/trajflow/trajflow/pipeline"
)

// A gateway with one session: the agent calls it as it would call
// OpenAI, with the session's base URL and key.
func Example() {
	srv := gateway.New(gateway.Options{Model: "policy"})
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close(context.Background())

	s := srv.Open(gateway.ModelFunc(func(ctx context.Context, c *gateway.Call) (*gateway.Answer, error) {
		last := c.Messages[len(c.Messages)-1]
		return &gateway.Answer{
			Message:      pipeline.Message{Role: pipeline.RoleAssistant, Content: "You said: " + last.Content},
			FinishReason: "stop",
		}, nil
	}))
	defer s.End()

	req, _ := http.NewRequest("POST", s.OpenAIBaseURL+"/chat/completions",
		strings.NewReader(`{"model":"policy","messages":[{"role":"user","content":"hello"}]}`))
	req.Header.Set("Authorization", "Bearer "+s.Key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Println(res.StatusCode, strings.Contains(string(body), `"content":"You said: hello"`))
	fmt.Println("calls:", s.Calls(), "key prefix:", s.Key[:3], "sessions open:", srv.Stats().SessionsOpen)
	// Output:
	// 200 true
	// calls: 1 key prefix: tf- sessions open: 1
}
