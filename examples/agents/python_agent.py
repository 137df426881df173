#!/usr/bin/env python3
"""An agent in plain Python (standard library only) that trajflow runs per
rollout (env.name: agent). It reads the task row from stdin, calls the
model through the OpenAI Chat Completions API at OPENAI_BASE_URL with
OPENAI_API_KEY, offers a calculator tool, and prints its reward as the
JSON object of its last stdout line.

Its first argument picks a behaviour (the end-to-end tests use them all):
  solve     call the model up to four times, running its tool calls
  rewrite   two calls, then a third whose history is a one-line summary
  nocall    print a reward without calling the model
  slow      one call, then sleep (to be killed or to time out)
  crash     one call, then exit 3 with a message on stderr
  flaky     crash on a sample's first try, solve on the next (a marker file
            per task and rollout in AGENT_MARK_DIR remembers the first)
  malformed send 20 malformed calls, check each is refused with a 4xx in
            the API's error shape, then solve; the reward is 1 only when
            every refusal was right
"""
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

BASE = os.environ["OPENAI_BASE_URL"].rstrip("/")
KEY = os.environ["OPENAI_API_KEY"]
MODEL = os.environ.get("TRAJFLOW_MODEL", "policy")

TOOLS = [{
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluates an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}]


def post(path, body, key=KEY, raw=None, base=BASE, headers=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method="POST")
    req.add_header("Content-Type", "application/json")
    req.add_header("Authorization", "Bearer " + key)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text.decode(errors="replace")
    except (urllib.error.URLError, ConnectionError) as e:
        return 0, str(e)


def chat(messages):
    status, body = post("/chat/completions", {"model": MODEL, "messages": messages, "tools": TOOLS, "temperature": 1.0})
    if status != 200:
        sys.exit(f"chat completions: {status}: {body}")
    return body["choices"][0]["message"]


def calculator(expression):
    if not re.fullmatch(r"[0-9+\-*/(). ]+", expression or ""):
        return "error: only digits and + - * / ( ) are allowed"
    try:
        return str(eval(expression, {"__builtins__": {}}))  # checked above: arithmetic only
    except Exception as e:  # noqa: BLE001 - the model's expression
        return f"error: {e}"


def solve(task, messages, calls=4):
    answer = ""
    for _ in range(calls):
        msg = chat(messages)
        messages.append({k: msg[k] for k in ("role", "content", "tool_calls") if msg.get(k) is not None})
        answer = msg.get("content") or ""
        if not msg.get("tool_calls"):
            break
        for call in msg["tool_calls"]:
            try:
                args = json.loads(call["function"]["arguments"] or "{}")
            except ValueError:
                args = {}
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": calculator(str(args.get("expression", "")))})
    return answer


def first_messages(task):
    return [{"role": "system", "content": "Answer briefly. Use the calculator for arithmetic."},
            {"role": "user", "content": task.get("question", "What is 2 + 2?")}]


def malformed():
    """20 calls the gateway must refuse, each with (status, shape)."""
    good = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    session = BASE.rsplit("/v1", 1)[0]
    root = session.rsplit("/s/", 1)[0]
    cases = [
        ("wrong key", lambda: post("/chat/completions", good, key="tf-wrong"), 401, "openai"),
        ("unknown session", lambda: post("/chat/completions", good, base=root + "/s/nosuchsession/v1"), 404, "openai"),
        ("bad JSON", lambda: post("/chat/completions", None, raw=b"{not json"), 400, "openai"),
        ("huge body", lambda: post("/chat/completions", None, raw=b'{"x":"' + b"a" * int(os.environ.get("AGENT_HUGE_BYTES", str(40 << 20))) + b'"}'), 413, "openai"),
        ("n > 1", lambda: post("/chat/completions", dict(good, n=2)), 400, "openai"),
        ("logit_bias", lambda: post("/chat/completions", dict(good, logit_bias={"1": 5})), 400, "openai"),
        ("audio", lambda: post("/chat/completions", dict(good, audio={"voice": "x"})), 400, "openai"),
        ("no messages", lambda: post("/chat/completions", {"model": MODEL, "messages": []}), 400, "openai"),
        ("unknown role", lambda: post("/chat/completions", {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}), 400, "openai"),
        ("unknown tool result", lambda: post("/chat/completions", {"model": MODEL, "messages": [
            {"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "call_nope", "content": "1"}]}), 400, "openai"),
        ("bad max_tokens", lambda: post("/chat/completions", dict(good, max_tokens=-3)), 400, "openai"),
        ("image", lambda: post("/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}), 400, "openai"),
        ("responses previous_response_id", lambda: post("/responses", {"model": MODEL, "input": "hi", "previous_response_id": "resp_1"}), 400, "openai"),
        ("responses bad tool type", lambda: post("/responses", {"model": MODEL, "input": "hi", "tools": [{"type": "web_search"}]}), 400, "openai"),
        ("responses unknown call output", lambda: post("/responses", {"model": MODEL, "input": [
            {"type": "function_call_output", "call_id": "nope", "output": "1"}]}), 400, "openai"),
        ("messages without max_tokens", lambda: post("/messages", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
                                                     base=session + "/v1", headers={"x-api-key": KEY}), 400, "anthropic"),
        ("messages unknown tool_result", lambda: post("/messages", {"model": MODEL, "max_tokens": 16, "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_nope", "content": "1"}]}]},
            base=session + "/v1", headers={"x-api-key": KEY}), 400, "anthropic"),
        ("messages wrong key", lambda: post("/messages", {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
                                            key="tf-wrong", base=session + "/v1", headers={"x-api-key": "tf-wrong"}), 401, "anthropic"),
        ("messages bad JSON", lambda: post("/messages", None, raw=b"[", base=session + "/v1", headers={"x-api-key": KEY}), 400, "anthropic"),
        ("reward not a number", lambda: post("/reward", {"reward": "high"}, base=session), 400, "openai"),
    ]
    ok = 0
    for name, call, want, shape in cases:
        status, body = call()
        if shape == "anthropic":
            good_shape = isinstance(body, dict) and body.get("type") == "error" and isinstance(body.get("error"), dict) and body["error"].get("message")
        else:
            good_shape = isinstance(body, dict) and isinstance(body.get("error"), dict) and body["error"].get("message")
        if status == want and good_shape:
            ok += 1
        else:
            print(f"malformed call {name!r}: got {status} {str(body)[:200]}, want {want} in the {shape} shape", file=sys.stderr)
    return ok, len(cases)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "solve"
    task = json.loads(sys.stdin.readline() or "{}")
    expected = str(task.get("expected_answer", ""))
    metrics = {}
    if mode == "nocall":
        print(json.dumps({"reward": 1}))
        return
    if mode == "malformed":
        ok, n = malformed()
        metrics["refused_right"] = ok
        answer = solve(task, first_messages(task))
        print(json.dumps({"reward": 1 if ok == n else 0, "metrics": metrics}))
        return
    messages = first_messages(task)
    if mode == "rewrite":
        answer = solve(task, messages, calls=1)
        messages.append({"role": "user", "content": "Check your answer."})
        answer = solve(task, messages, calls=1)
        summary = [messages[0], {"role": "user", "content": "Earlier you answered: " + answer[:80] + ". Say the final answer."}]
        answer = solve(task, summary, calls=1)
    elif mode == "slow":
        answer = solve(task, messages, calls=1)
        time.sleep(float(os.environ.get("AGENT_SLEEP", "600")))
    elif mode == "flaky":
        mark = os.path.join(os.environ["AGENT_MARK_DIR"], os.environ["TRAJFLOW_TASK_INDEX"] + "-" + os.environ["TRAJFLOW_ROLLOUT_INDEX"])
        if not os.path.exists(mark):
            open(mark, "w").close()
            solve(task, messages, calls=1)
            print("the agent failed on its first try", file=sys.stderr)
            sys.exit(3)
        answer = solve(task, messages)
    elif mode == "crash":
        solve(task, messages, calls=1)
        print("the agent gave up: out of ideas", file=sys.stderr)
        sys.exit(3)
    else:
        answer = solve(task, messages)
    reward = 1 if expected and expected in answer else 0
    print(json.dumps({"reward": reward, "answer": answer[:200], "metrics": metrics}))


if __name__ == "__main__":
    main()
