package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// gymPath is the NeMo Gym model-server route, at the server's root: a
// Gym agent server is configured with its model server's address before
// the run and calls {address}/v1/responses, with no session in the path
// and no key.
const gymPath = "/v1/responses"

// GymSessionKey is the metadata key that attributes a call on the NeMo
// Gym route to its session: responses_create_params.metadata
// ["trajflow_session"], which Gym's simple agent forwards to its model
// server with every call of the rollout.
const GymSessionKey = "trajflow_session"

// serveGym answers POST /v1/responses at the root as NeMo Gym's vllm_model
// does: the Responses API, not streamed, the call attributed to its
// session by metadata.trajflow_session (the session's id, which is the
// call's only credential). A call that cannot be attributed is refused,
// never guessed.
func (s *Server) serveGym(w http.ResponseWriter, r *http.Request, start time.Time) {
	refuse := func(e *reqError) {
		s.stats.refused.Add(1)
		s.log.Info("gateway: call refused", "path", gymPath, "status", e.Status, "err", e.Error())
		writeError(w, shapeOpenAI, e)
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		refuse(&reqError{Status: http.StatusMethodNotAllowed, Msg: fmt.Sprintf("method %s is not allowed here; use POST", r.Method)})
		return
	}
	body, e := s.readBody(w, r)
	if e != nil {
		refuse(e)
		return
	}
	// One decoding of the body: the session's id, then the call.
	o, e := decodeObj(body)
	if e != nil {
		refuse(e)
		return
	}
	id, e := gymSession(o)
	if e != nil {
		refuse(e)
		return
	}
	s.mu.Lock()
	ss := s.sessions[id]
	s.mu.Unlock()
	if ss == nil {
		refuse(noGymSession())
		return
	}
	call, req, e := responsesOf(o)
	if e != nil {
		refuse(e)
		return
	}
	if call.Stream {
		refuse(badf("stream", "NeMo Gym's model server answers whole (its create params allow only stream: false)"))
		return
	}
	if !ss.begin() {
		refuse(noGymSession())
		return
	}
	defer ss.inflight.Done()
	req.Gym = true
	s.answerCall(w, r, ss, responsesCodec{}, call, req, shapeOpenAI, start)
}

// noGymSession refuses a Gym call whose session is unknown or ended.
func noGymSession() *reqError {
	return &reqError{Status: http.StatusNotFound, Param: "metadata." + GymSessionKey, Msg: "metadata." + GymSessionKey + ": no open session has this id (unknown, or its rollout ended)"}
}

// gymSession is the session id a Gym call's decoded body names in
// metadata.trajflow_session.
func gymSession(o obj) (string, *reqError) {
	const where = "metadata." + GymSessionKey
	if !o.has("metadata") {
		return "", badf(where, "missing: a call to the gateway's root /v1/responses is attributed to its rollout by metadata.%s (set in the row's responses_create_params, which NeMo Gym's agent forwards); this call has no metadata", GymSessionKey)
	}
	var md map[string]json.RawMessage
	if err := json.Unmarshal(o["metadata"], &md); err != nil {
		return "", badf("metadata", "must be an object of strings")
	}
	raw, ok := md[GymSessionKey]
	if !ok || isNull(raw) {
		return "", badf(where, "missing: a call to the gateway's root /v1/responses is attributed to its rollout by metadata.%s (set in the row's responses_create_params, which NeMo Gym's agent forwards); this call's metadata has no such key", GymSessionKey)
	}
	var id string
	if err := json.Unmarshal(raw, &id); err != nil || id == "" {
		return "", badf(where, "must be a non-empty string (the session id trajflow put in the row)")
	}
	return id, nil
}

// gymTokens adds to the last of the output items the token fields Gym's
// vllm_model adds for training (nemo_gym/openai_utils.py
// TokenIDLogProbMixin, set by responses_converter.py
// postprocess_assistant_message_dict on response_output[-1]):
// prompt_token_ids, generation_token_ids and generation_log_probs. Gym
// requires the three together, so none is added when the answer has no
// ids or a logprob is missing.
func gymTokens(items []map[string]any, a *Answer) {
	ids, lps := a.Message.TokenIDs, a.Message.Logprobs
	if len(items) == 0 || len(ids) == 0 || len(lps) != len(ids) || a.PromptTokenIDs == nil {
		return
	}
	gen := make([]int64, len(ids))
	for i, v := range ids {
		gen[i] = int64(v)
	}
	prompt := make([]int64, len(a.PromptTokenIDs))
	for i, v := range a.PromptTokenIDs {
		prompt[i] = int64(v)
	}
	lp := make([]float64, len(lps))
	for i, v := range lps {
		lp[i] = float64(v)
	}
	last := items[len(items)-1]
	last["prompt_token_ids"] = prompt
	last["generation_token_ids"] = gen
	last["generation_log_probs"] = lp
}
