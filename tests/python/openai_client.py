"""Drives tollgate with the official openai package (run by tests/tests/openai_python.rs)."""
import os
import sys

import openai

client = openai.OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment

chat = client.chat.completions.create(
    model="gpt-4o-mini", messages=[{"role": "user", "content": "Say hello"}], max_tokens=8
)
assert chat.choices[0].message.content, chat
assert chat.usage.completion_tokens == 8, chat.usage
print("chat ok")

chunks = list(
    client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Stream please"}],
        stream=True,
        stream_options={"include_usage": True},
        max_tokens=5,
    )
)
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
usage = chunks[-1].usage
assert text and usage is not None and usage.completion_tokens == 5, (text, usage)
print("stream ok")

emb = client.embeddings.create(model="text-embedding-3-small", input=["one", "two"])
assert len(emb.data) == 2 and len(emb.data[0].embedding) > 0, emb
print("embedding ok")

bad = openai.OpenAI(api_key="tg-" + "x" * 38)
try:
    bad.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    sys.exit("a bad key was accepted")
except openai.AuthenticationError as e:
    assert e.status_code == 401 and e.body["code"] == "invalid_api_key", e.body
print("bad key ok")

# A stream cut off by the budget ends like any stream: no exception, the last
# choice says finish_reason "length".
cutoff = openai.OpenAI(api_key=os.environ["OPENAI_CUTOFF_KEY"])
stream = cutoff.chat.completions.create(
    model="gpt-4o-mini",
    messages=[{"role": "user", "content": "Write a lot [mock:output_tokens=5000]"}],
    stream=True,
    max_tokens=5000,
)
reasons = [c.choices[0].finish_reason for c in stream if getattr(c, "choices", None)]
assert reasons and reasons[-1] == "length", reasons[-5:]
print("cutoff ok")
