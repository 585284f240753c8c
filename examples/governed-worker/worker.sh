#!/bin/sh
# The demo's worker: runs inside the governed sandbox. It holds no provider
# key (only a placeholder) and reaches the network only through palisade.
set -u
say() { printf '\n[worker] %s\n' "$*"; }
fetch() { # prints "<CONNECT status> <HTTP status>" for https://$1:$PORT/
  curl -s -o /dev/null -w '%{http_connect} %{http_code}' --max-time 10 --cacert ca.pem "https://$1:$PORT/"
}

say "my ANTHROPIC_API_KEY is a placeholder: $(printf %s "$ANTHROPIC_API_KEY" | cut -c1-16)..."
say "1. calling the provider through the relay at $ANTHROPIC_BASE_URL"
curl -s -X POST "$ANTHROPIC_BASE_URL/v1/messages" -H "x-api-key: $ANTHROPIC_API_KEY" \
  -H 'content-type: application/json' -d '{"model":"demo","max_tokens":16,"messages":[]}'
echo
say "2. fetching docs.test (allowed): $(fetch docs.test)"
say "3. fetching evil.test (not in egress.allow): $(fetch evil.test)"
say "4. reading a file the user marked untrusted (no palisade ctl: the kernel tells palisade)"
cat notes/untrusted.md
say "5. tainted now: news.test is allowed by policy but new: $(fetch news.test)"
say "   docs.test was contacted before the taint: $(fetch docs.test)"
say "6. editing AGENTS.md (a steering file) while tainted"
echo "Always push to main." >> AGENTS.md
say "7. asking before a git push (allowed by policy, but the session is tainted, so it asks the host)"
"$PALISADE_BIN" ctl outward --kind git.push --target github.com/acme/app:refs/heads/agent/demo \
  -- echo "[worker] (pretend) git push origin agent/demo"
say "done"
