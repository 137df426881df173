package openai

import (
	"fmt"
	"strings"

	"github.com/trajflow/trajflow/inference"
)

// Protocol is one generate.api value on the wire: where its requests go,
// their bodies, how an answer is read, and how its requests in flight are
// aborted. The HTTP client is the transport that carries any protocol: it
// keeps the fleet, retries, the breaker, preflight, 429 handling, the
// abort calls and context learning, and asks the protocol registered
// under generate.api (inference.RegisterProtocol) for the rest. Each
// protocol is one file (chat.go, completions.go, tokens.go, batchapi.go,
// sglang.go) and one line in protocols.go.
type Protocol interface {
	inference.Protocol
	// Call is req as the protocol sends it.
	Call(req *inference.Request) (*Call, error)
	// AbortBodies are the bodies of POST {root}/abort_request that abort
	// the protocol's requests on one endpoint, given the ids (Call.ID) of
	// its requests in flight there; none: nothing to ask that endpoint.
	AbortBodies(ids []string) []string
}

// Call is one request as a protocol sends it: the transport sends Body
// to Path on an endpoint, retrying as configured, and hands a 2xx body to
// Decode.
type Call struct {
	// Path is where Body goes, under the endpoint's base URL
	// (/chat/completions), or under its root with Root set (/generate).
	Path string
	Root bool
	Body []byte
	// Decode reads a 2xx body (an error makes the attempt a bad_response).
	Decode func(data []byte) (*inference.Response, error)
	// ID, when set, names the request to the server (SGLang's rid): the
	// transport keeps where it is in flight for AbortBodies, and it is the
	// response's RequestID (HTTPOptions.KeepBody) in place of the
	// x-request-id header.
	ID string
	// Hint is added to the message of a final HTTP error (class http)
	// whose status is one of HintOn: what the server lacks and what to use.
	Hint   string
	HintOn []int
	// PriorityFinal makes a server's refusal of the request's priority its
	// answer; without it the transport sends the request again without
	// one, and none from then on (generate.priority: auto).
	PriorityFinal bool
}

// hint adds c's hint to err when its status is one of HintOn.
func (c *Call) hint(e *inference.Error) {
	if c.Hint == "" || e.Class != inference.ClassHTTP {
		return
	}
	for _, st := range c.HintOn {
		if e.Status == st {
			e.Msg += c.Hint
			return
		}
	}
}

// protocolOf is the wire protocol registered under api ("" is the
// default, chat).
func protocolOf(api inference.API) (Protocol, error) {
	if api == "" {
		api = inference.APIChat
	}
	if p, ok := inference.ProtocolOf(api); ok {
		if w, ok := p.(Protocol); ok {
			return w, nil
		}
	}
	var names []string
	for _, a := range inference.APIs() {
		if p, _ := inference.ProtocolOf(a); p != nil {
			if _, ok := p.(Protocol); ok {
				names = append(names, string(a))
			}
		}
	}
	return nil, fmt.Errorf("%q is not one of %s", api, strings.Join(names, ", "))
}

// abortAll is the abort of the OpenAI-API protocols: SGLang's POST
// /abort_request {"abort_all": true} on every endpoint (the simulator has
// it too; vLLM has no such call: its requests are cancelled by the
// client). Each aborted request answers with the tokens it generated so
// far and finish_reason "abort".
type abortAll struct{}

func (abortAll) AbortBodies([]string) []string { return []string{`{"abort_all": true}`} }
