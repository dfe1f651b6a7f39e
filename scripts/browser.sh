#!/usr/bin/env bash
# A headless browser for the page tests (they skip without one): Debian's chromium,
# installed when this machine can (root with apt-get); otherwise one line says so.
# `make test` runs it; it never fails the build.
set -uo pipefail
command -v chromium >/dev/null && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "setup: no chromium here; the page tests will skip (install it: apt-get install chromium)" >&2
    exit 0
fi
echo "setup: installing chromium from Debian's packages, for the page tests" >&2
install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1; }
install || { apt-get update -qq >/dev/null 2>&1 && install; } ||
    echo "setup: chromium could not be installed; the page tests will skip" >&2
exit 0
