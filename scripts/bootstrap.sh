# Sourced by scripts/run and scripts/test: make .venv with Python 3.12+ and install the
# project into it (again only when pyproject.toml changed). Everything the project needs is
# installed here, so a fresh clone on a fresh machine works.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

find_python() {
  local candidate
  for candidate in "${PYTHON:-}" python3.12 python3.13 python3; do
    [ -n "$candidate" ] || continue
    command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null
    then
      echo "$candidate"
      return 0
    fi
  done
  echo "receiptsite needs Python 3.12 or newer (Django 6 does); none was found." >&2
  echo "Install one (e.g. 'pyenv install 3.12') or set PYTHON=/path/to/python3.12." >&2
  return 1
}

bootstrap() {
  local extras="$1" stamp
  if [ ! -x .venv/bin/python ]; then
    "$(find_python)" -m venv .venv
  fi
  # The site's own install brings the client (clients/python, a path dependency in
  # pyproject.toml); it is then installed again, editable, so that the tests and the site run
  # the client's working tree, not a copy of it.
  stamp=".venv/.installed-$(cat pyproject.toml clients/python/pyproject.toml | sha256sum | cut -c1-16)-${extras:-base}"
  if [ ! -e "$stamp" ]; then
    # uv installs what pip would, in seconds rather than minutes (the test extra's framework
    # packages are a large tree to resolve), from the package sources pip is configured with.
    .venv/bin/python -m pip install --quiet "uv>=0.13,<0.14"
    uv_sources_from_pip
    .venv/bin/uv pip install --python .venv/bin/python --quiet -e ".${extras:+[$extras]}"
    .venv/bin/uv pip install --python .venv/bin/python --quiet --no-deps -e clients/python
    touch "$stamp"
  fi
}

# pip's configured package sources (an index, extra indexes, folders of wheels, constraints,
# a CA bundle: pip.conf or PIP_* variables), as uv's variables; nothing when pip has none.
uv_sources_from_pip() {
  local line key value
  while IFS= read -r line; do
    key="${line#*.}"; key="${key%%=*}"
    value="${line#*=}"; value="${value#\'}"; value="${value%\'}"
    case "$key" in
      index-url) export UV_DEFAULT_INDEX="$value" ;;
      extra-index-url) export UV_EXTRA_INDEX_URL="$value" ;;
      find-links) export UV_FIND_LINKS="${value// /,}" ;;
      constraint) export UV_CONSTRAINT="$value" ;;
      cert) export SSL_CERT_FILE="$value" ;;
    esac
  done < <(.venv/bin/python -m pip config list 2>/dev/null)
  # pip takes the best version from any of its indexes; so does uv, told so.
  export UV_INDEX_STRATEGY=unsafe-best-match
}

bootstrap_test_packages() {
  # Debian packages the tests use: chromium for the browser tests, gettext for the check that
  # the translation catalogues hold exactly the strings the code marks, wrk for the smoke test
  # of bench/run.py, nginx for the front proxy's test (deploy/nginx), systemd's
  # systemd-analyze for the check of the units (deploy/systemd), openssl for the test's
  # self-signed certificate.
  missing=()
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v xgettext >/dev/null 2>&1 || missing+=(gettext)
  command -v wrk >/dev/null 2>&1 || missing+=(wrk)
  [ -x /usr/sbin/nginx ] || missing+=(nginx)
  command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
      echo "Installing Debian's ${missing[*]} for the tests..."
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null
    else
      echo "The tests need Debian's ${missing[*]}: sudo apt-get install -y ${missing[*]}" >&2
      exit 1
    fi
  fi
}
