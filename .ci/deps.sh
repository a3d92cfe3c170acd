#!/bin/sh
# Installs the Debian packages named on the command line that are not installed yet.
# Uses sudo when not root. Prints nothing when everything is present.
missing=""
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq || exit 1
$sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null || exit 1
