#!/bin/sh
# The guest end of the harness's control channel (the guest's second serial
# port, a unix socket on the host). Line protocol, one request at a time:
#   host:  X <token> <base64 of a shell script>
#   guest: O <token>            then the script's stdout+stderr, base64,
#          R <token> <status>   the script's exit status.
# Base64 keeps every byte of output and script intact through the tty.
cd /
while read -r verb token b64; do
    case "$verb" in
        X)
            printf '%s' "$b64" | base64 -d > /tmp/agent.cmd 2>/dev/null
            sh /tmp/agent.cmd < /dev/null > /tmp/agent.out 2>&1
            rc=$?
            printf 'O %s\n' "$token"
            base64 < /tmp/agent.out
            printf 'R %s %s\n' "$token" "$rc" ;;
        *) ;;
    esac
done
