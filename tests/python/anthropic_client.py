"""Drives tollgate's /v1/messages with the official anthropic package (run
by tests/tests/dialects_python.rs). MODEL picks a chat-only model
(translated) or a native one (passed through)."""
import os
import sys

import anthropic

MODEL = os.environ["DIALECT_MODEL"]
client = anthropic.Anthropic()  # ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY (sent as x-api-key)
hello = [{"role": "user", "content": "Say hello [mock:output_tokens=8]"}]

raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=50, messages=hello, system="Be brief",
                                               stop_sequences=["END"])
m = raw.parse()
assert m.content[0].type == "text" and m.content[0].text == " hello" * 8, m
assert m.stop_reason == "end_turn" and m.usage.output_tokens == 8 and m.usage.input_tokens > 0, m
print("BILL", raw.headers["x-request-id"], m.usage.input_tokens, m.usage.output_tokens)
print("create ok")

# The key as a bearer token works as well.
bearer = anthropic.Anthropic(auth_token=os.environ.pop("ANTHROPIC_API_KEY"))
assert bearer.messages.create(model=MODEL, max_tokens=2, messages=hello).usage.output_tokens == 2
print("bearer ok")

with client.messages.stream(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "Stream"}]) as s:
    text = "".join(s.text_stream)
    final = s.get_final_message()
    rid = s.response.headers["x-request-id"]
assert text == " hello" * 5, text
assert final.usage.output_tokens == 5 and final.stop_reason == "max_tokens", final
print("BILL", rid, final.usage.input_tokens, final.usage.output_tokens)
print("stream ok")

raw = client.messages.with_raw_response.count_tokens(model=MODEL, messages=hello, system="Be brief")
n = raw.parse().input_tokens
assert n > 0, n
print("NOCHARGE", raw.headers["x-request-id"])
print("count_tokens ok")

# Models in Anthropic's shape (the SDK sends anthropic-version).
got = client.models.retrieve(MODEL)
assert got.type == "model" and got.id == MODEL and got.display_name, got
assert MODEL in [m.id for m in client.models.list()]
try:
    client.models.retrieve("no-such-model")
    sys.exit("an unknown model was retrieved")
except anthropic.NotFoundError as e:
    assert e.status_code == 404 and e.body["type"] == "error", e.body
    assert e.body["error"]["type"] == "not_found_error", e.body
print("models ok")

cut = anthropic.Anthropic(api_key=os.environ["CUTOFF_KEY"])
with cut.messages.stream(model=MODEL, max_tokens=5000, messages=[
        {"role": "user", "content": "Write a lot [mock:output_tokens=5000] [mock:chunk_delay_ms=1]"}]) as s:
    text = "".join(s.text_stream)
    final = s.get_final_message()
    rid = s.response.headers["x-request-id"]
assert final.stop_reason == "max_tokens", final.stop_reason
assert 0 < len(text) < 5000 * len(" hello"), len(text)
print("CUT", rid, final.usage.input_tokens, final.usage.output_tokens)
print("cutoff ok")

tools = [{"name": "get_weather", "description": "The weather in a city",
          "input_schema": {"type": "object", "properties": {"arg": {"type": "string"}}}}]
ask = [{"role": "user", "content": "Weather? [mock:tool_call]"}]
first = client.messages.create(model=MODEL, max_tokens=50, tools=tools, messages=ask)
use = next(b for b in first.content if b.type == "tool_use")
assert first.stop_reason == "tool_use" and use.name == "get_weather" and use.input == {"arg": "hello"}, first
with client.messages.stream(model=MODEL, max_tokens=50, tools=tools, messages=ask) as s:
    streamed = s.get_final_message()
assert streamed.stop_reason == "tool_use" and streamed.content[-1].input == {"arg": "hello"}, streamed
second = client.messages.create(model=MODEL, max_tokens=3, tools=tools, messages=ask + [
    {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]},
])
assert second.content[0].text == " hello" * 3 and second.stop_reason == "max_tokens", second
print("tools ok")

for body, param in [
    ({"model": MODEL, "messages": hello}, "max_tokens"),
    ({"model": MODEL, "max_tokens": 5, "messages": []}, "messages"),
    ({"model": MODEL, "max_tokens": 5, "messages": hello, "temperature": 1.5}, "temperature"),
    ({"model": MODEL, "max_tokens": 5, "messages": [{"role": "boss", "content": "x"}]}, "messages[0].role"),
]:
    try:
        client.post("/v1/messages", body=body, cast_to=object)
        sys.exit(f"{body} was accepted")
    except anthropic.BadRequestError as e:
        assert e.status_code == 400, e
        assert e.body["type"] == "error" and e.body["error"]["type"] == "invalid_request_error", e.body
        assert param in e.body["error"]["message"], e.body
        assert e.response.headers["x-tollgate-reason"] == "invalid_request"
        print("NOCHARGE", e.response.headers["x-request-id"])
try:
    anthropic.Anthropic(api_key="tg-" + "x" * 38).messages.create(model=MODEL, max_tokens=5, messages=hello)
    sys.exit("a bad key was accepted")
except anthropic.AuthenticationError as e:
    assert e.status_code == 401 and e.body["error"]["type"] == "authentication_error", e.body
print("bad input ok")
