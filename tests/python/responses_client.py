"""Drives tollgate's /v1/responses with the official openai package (run by
tests/tests/dialects_python.rs). MODEL picks a chat-only model (translated)
or a native one (passed through). Prints BILL/CUT/NOCHARGE lines the Rust
test checks against the ledger, and one "... ok" line per check."""
import os
import sys

import openai

MODEL = os.environ["DIALECT_MODEL"]
client = openai.OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment

raw = client.responses.with_raw_response.create(model=MODEL, input="Say hello [mock:output_tokens=8]",
                                                max_output_tokens=50)
r = raw.parse()
assert r.output_text == " hello" * 8, r
assert r.status == "completed" and r.usage.output_tokens == 8 and r.usage.input_tokens > 0, r.usage
print("BILL", raw.headers["x-request-id"], r.usage.input_tokens, r.usage.output_tokens)
print("create ok")

raw = client.responses.with_raw_response.create(
    model=MODEL, input=[{"role": "user", "content": [{"type": "input_text", "text": "Stream [mock:output_tokens=5]"}]}],
    instructions="Be brief", max_output_tokens=50, stream=True,
)
deltas, final = [], None
for ev in raw.parse():
    if ev.type == "response.output_text.delta":
        deltas.append(ev.delta)
    elif ev.type == "response.completed":
        final = ev.response
assert "".join(deltas) == " hello" * 5, deltas
assert final is not None and final.usage.output_tokens == 5, final
assert final.output_text == " hello" * 5, final
print("BILL", raw.headers["x-request-id"], final.usage.input_tokens, final.usage.output_tokens)
print("stream ok")

# A 5,000-token stream against a 1,200-token budget: it ends cleanly with
# response.incomplete, the SDK raising nothing.
cut = openai.OpenAI(api_key=os.environ["CUTOFF_KEY"])
raw = cut.responses.with_raw_response.create(
    model=MODEL, input="Write a lot [mock:output_tokens=5000] [mock:chunk_delay_ms=1]",
    max_output_tokens=5000, stream=True,
)
events = list(raw.parse())
last = events[-1]
assert last.type == "response.incomplete", [e.type for e in events[-4:]]
assert last.response.incomplete_details.reason == "max_output_tokens", last.response
text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
assert 0 < len(text) < 5000 * len(" hello"), len(text)
print("CUT", raw.headers["x-request-id"], last.response.usage.input_tokens, last.response.usage.output_tokens)
print("cutoff ok")

tools = [{"type": "function", "name": "get_weather", "description": "The weather in a city",
          "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}}}]
first = client.responses.create(model=MODEL, input="Weather? [mock:tool_call]", tools=tools, max_output_tokens=50)
call = next(o for o in first.output if o.type == "function_call")
assert call.name == "get_weather" and call.arguments == '{"arg":"hello"}', call
second = client.responses.create(
    model=MODEL, tools=tools, max_output_tokens=3,
    input=[{"role": "user", "content": "Weather? [mock:tool_call]"},
           {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
           {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
)
assert second.output_text == " hello" * 3, second
print("tools ok")

for kwargs, param in [
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"store": True}, "store"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
] + ([] if MODEL == "native-model" else [({"tools": [{"type": "teleport"}]}, "tools[0].type")]):
    try:
        client.responses.create(model=MODEL, input="hi", **kwargs)
        sys.exit(f"{kwargs} was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == param, e.body
        assert e.body["code"] == "invalid_request", e.body
        assert e.response.headers["x-tollgate-reason"] == "invalid_request"
        print("NOCHARGE", e.response.headers["x-request-id"])
print("bad input ok")

got = client.models.retrieve(MODEL)
assert got.id == MODEL and got.object == "model", got
try:
    client.models.retrieve("no-such-model")
    sys.exit("an unknown model was retrieved")
except openai.NotFoundError as e:
    assert e.status_code == 404 and e.body["code"] == "model_not_found", e.body
print("models ok")

# Today's Codex tools: a custom tool goes to a chat provider as a function of
# one string and comes back as a custom_tool_call; a hosted tool is refused
# for a chat provider and passed to a native one.
web = [{"type": "web_search"}]
if MODEL == "native-model":
    r = client.responses.create(model=MODEL, input="hi [mock:output_tokens=3]", tools=web)
    assert r.output_text == " hello" * 3, r
else:
    for tools, named in [(web, "web_search"), ([{"type": "function", "name": "f", "parameters": {}},
                                               {"type": "tool_search"}], "tool_search")]:
        try:
            client.responses.create(model=MODEL, input="hi", tools=tools)
            sys.exit(f"{named} was accepted")
        except openai.BadRequestError as e:
            assert e.status_code == 400 and e.body["param"] == f"tools[{len(tools) - 1}].type", e.body
            assert named in e.body["message"], e.body
            print("NOCHARGE", e.response.headers["x-request-id"])
    custom = [{"type": "custom", "name": "apply_patch", "description": "Apply a patch",
               "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}]
    ask = [{"role": "user", "content": "Patch it [mock:tool_call]"}]
    r = client.responses.create(model=MODEL, input=ask, tools=custom)
    call = next(i for i in r.output if i.type == "custom_tool_call")
    assert call.name == "apply_patch" and call.input == '{"arg":"hello"}', r.output
    done = [e for e in client.responses.create(model=MODEL, input=ask, tools=custom, stream=True)
            if e.type == "response.completed"][0]
    streamed = next(i for i in done.response.output if i.type == "custom_tool_call")
    assert streamed.input == call.input, done.response.output
    second = client.responses.create(model=MODEL, tools=custom, input=ask + [
        {"type": "custom_tool_call", "call_id": call.call_id, "name": call.name, "input": call.input},
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "patched"}])
    assert second.output_text, second
print("codex tools ok")
