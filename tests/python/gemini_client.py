"""Drives tollgate's Gemini API (/v1beta/models/{m}:…) with Google's official
google-genai package (run by tests/tests/dialects_python.rs): generate_content,
generate_content_stream, count_tokens, a function call round trip, and a stream
cut at the budget ending the clean Gemini way (finishReason MAX_TOKENS) without
the SDK raising. Prints BILL / CUT lines with the request id and the usage."""
import os

from google import genai
from google.genai import types

MODEL = os.environ["DIALECT_MODEL"]
BASE = os.environ["GEMINI_BASE_URL"]


def client(key):
    return genai.Client(api_key=key, http_options=types.HttpOptions(base_url=BASE))


def rid_of(r):
    return r.sdk_http_response.headers["x-request-id"]


c = client(os.environ["GEMINI_API_KEY"])

r = c.models.generate_content(
    model=MODEL, contents="Say hello [mock:output_tokens=8]",
    config=types.GenerateContentConfig(system_instruction="Be brief", max_output_tokens=50, temperature=0.2))
assert r.text == " hello" * 8, r
assert r.candidates[0].finish_reason == types.FinishReason.STOP, r
u = r.usage_metadata
assert u.candidates_token_count == 8 and u.prompt_token_count > 0, u
assert u.total_token_count == u.prompt_token_count + 8, u
print("BILL", rid_of(r), u.prompt_token_count, u.candidates_token_count)
print("generate ok")

chunks = list(c.models.generate_content_stream(model=MODEL, contents="Stream [mock:output_tokens=6]"))
text = "".join(ch.text or "" for ch in chunks)
assert text == " hello" * 6, text
last = chunks[-1]
assert last.candidates[0].finish_reason == types.FinishReason.STOP, last
assert last.usage_metadata.candidates_token_count == 6, last.usage_metadata
print("BILL", rid_of(last), last.usage_metadata.prompt_token_count, 6)
print("stream ok")

n = c.models.count_tokens(model=MODEL, contents="How many tokens is this sentence?")
assert n.total_tokens and n.total_tokens > 0, n
print("count ok")

# A function call round trip: the model calls, the client answers, the model speaks.
weather = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="get_weather", description="The weather in a city",
    parameters=types.Schema(type=types.Type.OBJECT, properties={"arg": types.Schema(type=types.Type.STRING)}))])
ask = types.Content(role="user", parts=[types.Part(text="Weather? [mock:tool_call]")])
cfg = types.GenerateContentConfig(tools=[weather], max_output_tokens=3,
                                  automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
first = c.models.generate_content(model=MODEL, contents=[ask], config=cfg)
call = first.function_calls[0]
assert call.name == "get_weather" and call.args == {"arg": "hello"}, first
second = c.models.generate_content(model=MODEL, config=cfg, contents=[
    ask, first.candidates[0].content,
    types.Content(role="user", parts=[types.Part.from_function_response(name="get_weather", response={"sky": "sunny"})]),
])
assert second.text == " hello" * 3, second
print("tools ok")

# Over the budget: cut mid-stream, ended as MAX_TOKENS, no exception.
cut = client(os.environ["CUTOFF_KEY"])
chunks = list(cut.models.generate_content_stream(
    model=MODEL, contents="Write a lot [mock:output_tokens=5000] [mock:chunk_delay_ms=1]",
    config=types.GenerateContentConfig(max_output_tokens=5000)))
text = "".join(ch.text or "" for ch in chunks)
last = chunks[-1]
assert last.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS, last
assert 0 < len(text) < 5000 * len(" hello"), len(text)
print("CUT", rid_of(last), last.usage_metadata.prompt_token_count, last.usage_metadata.candidates_token_count)
print("cutoff ok")

# Refusals arrive as the SDK's own errors, with Google's status.
try:
    c.models.generate_content(model="no-such-model", contents="hi")
    raise SystemExit("an unknown model was served")
except genai.errors.ClientError as e:
    assert e.code == 404 and e.status == "NOT_FOUND", (e.code, e.status)
print("errors ok")
