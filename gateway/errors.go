package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// reqError is a call refused or failed, before or after the Model: its
// HTTP status, the request field at fault (empty when none) and a
// message that names it. It is written in the API's own error shape.
type reqError struct {
	Status int
	Param  string
	Msg    string
}

func (e *reqError) Error() string {
	if e.Param == "" {
		return e.Msg
	}
	return e.Param + ": " + e.Msg
}

// badf is a 400 refusal naming param.
func badf(param, format string, args ...any) *reqError {
	return &reqError{Status: http.StatusBadRequest, Param: param, Msg: fmt.Sprintf(format, args...)}
}

// errShape is the error shape of an API: openai (chat, responses,
// models, reward) or anthropic (messages).
type errShape int

const (
	shapeOpenAI errShape = iota
	shapeAnthropic
)

// openAIErrorType is the OpenAI error type of an HTTP status.
func openAIErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// anthropicErrorType is the Anthropic error type of an HTTP status.
func anthropicErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusServiceUnavailable || status == 529:
		return "overloaded_error"
	case status >= 500:
		return "api_error"
	default:
		return "invalid_request_error"
	}
}

// errorBody is e in shape's JSON.
func errorBody(shape errShape, e *reqError) []byte {
	var v any
	if shape == shapeAnthropic {
		v = map[string]any{
			"type":  "error",
			"error": map[string]any{"type": anthropicErrorType(e.Status), "message": e.Error()},
		}
	} else {
		var param any
		if e.Param != "" {
			param = e.Param
		}
		v = map[string]any{"error": map[string]any{
			"message": e.Error(),
			"type":    openAIErrorType(e.Status),
			"param":   param,
			"code":    nil,
		}}
	}
	b, _ := json.Marshal(v)
	return b
}

// writeError writes e in shape's JSON with its status.
func writeError(w http.ResponseWriter, shape errShape, e *reqError) {
	writeJSON(w, e.Status, errorBody(shape, e))
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
