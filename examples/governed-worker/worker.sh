#!/bin/sh
# The demo's worker: runs inside the governed sandbox. It holds no provider
# key (only a placeholder) and reaches the network only through palisade.
set -u
GITPORT=${GITPORT:-}
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
if [ -n "${PALISADE_RELAY_GITHUB_URL:-}" ] && command -v git >/dev/null 2>&1; then
  # The git relay: git is configured by palisade (GIT_CONFIG_*) to send
  # https://github.test:$GITPORT/ to the relay, which holds the credential.
  export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@example.invalid
  export GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@example.invalid
  export GIT_TERMINAL_PROMPT=0 HOME="$PWD"
  say "7. git clone https://github.test:$GITPORT/acme/app.git (a read, through the relay)"
  # Cloned into the sandbox's private /tmp: a new .git in the working
  # directory would be refused by the commit filter (new_repository).
  clone=$(mktemp -d)/app
  git clone -q "https://github.test:$GITPORT/acme/app.git" "$clone"
  say "   github.test directly, through the proxy: $(curl -s -o /dev/null -w '%{http_connect}' --max-time 10 "https://github.test:$GITPORT/") (relay_required)"
  cd "$clone"
  echo "A change by the agent." >>README.md
  git commit -q -am "agent: a change"
  say "8. git push origin HEAD:agent/demo (allowed by policy, but the session is tainted: the relay asks the host)"
  git push origin HEAD:agent/demo
  say "9. git push --force of an unrelated history to main (git.force_push is denied, nothing is asked)"
  git checkout -q --orphan rewrite
  git commit -q --allow-empty -m "agent: history rewritten"
  git push --force origin HEAD:main
  cd - >/dev/null
else
  say "7. asking before a git push (allowed by policy, but the session is tainted, so it asks the host)"
  "$PALISADE_BIN" ctl outward --kind git.push --target github.com/acme/app:refs/heads/agent/demo \
    -- echo "[worker] (pretend) git push origin agent/demo"
fi
say "done"
