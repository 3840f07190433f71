#!/usr/bin/env bash
# Lay out the references of `make bench-formats` (bench/formats/bench.py) under one folder, $1 (default
# data/bench-formats): real API documentation as each generator wrote it, one folder per reference.
#
# - Debian's documentation packages (installed with apt-get only when missing), linked by their HTML roots:
#   Sphinx (click, jinja2, werkzeug), Javadoc (commons-lang3, commons-io), Doxygen (assimp, box2d), GTK-Doc (cairo).
# - Generated here with the real generators from npm, at pinned versions, in a scratch folder outside $1
#   (BENCH_FORMATS_BUILD, default ~/.cache/bench-formats-build):
#   typedoc-three     TypeDoc's default theme over the declaration files of @types/three;
#   jsdoc-commander   JSDoc's default template over commander's annotated CommonJS source (lib/);
#   markdown-starlette the Markdown sources of Starlette's MkDocs site (docs/**/*.md from its sdist on PyPI).
#
# Idempotent: a generated folder carries a hidden `.prepared` stamp naming its versions and is rebuilt only
# when the stamp differs (or when FORCE=1); links are re-pointed. Needs apt-get (as root), node and npm, python3.
set -euo pipefail

OUT="${1:-data/bench-formats}"
BUILD="${BENCH_FORMATS_BUILD:-${XDG_CACHE_HOME:-$HOME/.cache}/bench-formats-build}"
PYTHON="${PYTHON:-python3}"

TYPEDOC_VERSION=0.28.20
TYPESCRIPT_VERSION=5.9.3  # TypeDoc 0.28 supports TypeScript 5.0-5.9 and 6.0
THREE_TYPES_VERSION=0.187.0
JSDOC_VERSION=4.0.5
COMMANDER_VERSION=11.1.0  # the last CommonJS major with `class` sources; 12+ are ES modules JSDoc misnames
STARLETTE_VERSION=1.10.0

DEBIAN_PACKAGES=(python-click-doc python-jinja2-doc python-werkzeug-doc libcommons-lang3-java-doc
                 libcommons-io-java-doc libassimp-doc libbox2d-doc libcairo2-doc)
declare -A ROOTS=(
  [click]=/usr/share/doc/python-click-doc/html
  [jinja2]=/usr/share/doc/python-jinja2-doc/html
  [werkzeug]=/usr/share/doc/python-werkzeug-doc/html
  [commons-lang3]=/usr/share/doc/libcommons-lang3-java/api
  [commons-io]=/usr/share/doc/libcommons-io-java/api
  [assimp]=/usr/share/doc/libassimp-doc/apiref
  [box2d]=/usr/share/doc/libbox2d-dev/html
  [cairo]=/usr/share/gtk-doc/html/cairo
)

say() { printf 'prepare: %s\n' "$*"; }

mkdir -p "$OUT" "$BUILD"
OUT="$(cd "$OUT" && pwd)"
BUILD="$(cd "$BUILD" && pwd)"
case "$BUILD/" in "$OUT"/*) echo "prepare: the scratch folder must lie outside $OUT" >&2; exit 2 ;; esac

# 1. Debian's documentation packages.
missing=()
for package in "${DEBIAN_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian documentation packages already installed (${#DEBIAN_PACKAGES[@]})"
fi
for name in $(printf "%s\n" "${!ROOTS[@]}" | sort); do
  root="${ROOTS[$name]}"
  if [[ ! -d "$root" ]]; then
    echo "prepare: $root is missing after installing the packages" >&2
    exit 1
  fi
  if [[ -e "$OUT/$name" && ! -L "$OUT/$name" ]]; then
    echo "prepare: $OUT/$name exists and is not a link; remove it first" >&2
    exit 1
  fi
  ln -sfn "$root" "$OUT/$name"
  say "linked $name -> $root"
done

# current STAMP FOLDER: whether FOLDER was prepared from exactly STAMP.
current() { [[ "${FORCE:-0}" != 1 && -f "$2/.prepared" && "$(cat "$2/.prepared")" == "$1" ]]; }

# npm_scratch NAME PACKAGE@VERSION...: a scratch npm project with exactly these packages installed.
npm_scratch() {
  local folder="$BUILD/$1"
  shift
  mkdir -p "$folder"
  if [[ ! -f "$folder/.installed" || "$(cat "$folder/.installed")" != "$*" ]]; then
    printf '{"private": true}\n' >"$folder/package.json"
    rm -rf "$folder/node_modules" "$folder/package-lock.json"
    (cd "$folder" && npm install --no-audit --no-fund --loglevel=error --save-exact "$@" >/dev/null)
    printf '%s' "$*" >"$folder/.installed"
    say "npm installed $* in $folder"
  fi
}

# 2. TypeDoc over @types/three.
stamp="typedoc@$TYPEDOC_VERSION typescript@$TYPESCRIPT_VERSION @types/three@$THREE_TYPES_VERSION"
target="$OUT/typedoc-three"
if current "$stamp" "$target"; then
  say "typedoc-three is current ($stamp)"
else
  npm_scratch typedoc "typedoc@$TYPEDOC_VERSION" "typescript@$TYPESCRIPT_VERSION" "@types/three@$THREE_TYPES_VERSION"
  cat >"$BUILD/typedoc/tsconfig.json" <<'JSON'
{"compilerOptions": {"target": "ES2020", "module": "ESNext", "moduleResolution": "bundler",
                     "lib": ["ES2020", "DOM"], "skipLibCheck": true, "types": []},
 "files": ["node_modules/@types/three/src/Three.d.ts"]}
JSON
  rm -rf "$target"
  # Declaration files are documented as they are: no type check, no README page, warnings (broken {@link}s in
  # the declarations) not printed.
  (cd "$BUILD/typedoc" && npx --no-install typedoc --entryPoints node_modules/@types/three/src/Three.d.ts \
     --tsconfig tsconfig.json --skipErrorChecking --readme none --name three --logLevel Error --out "$target")
  printf '%s' "$stamp" >"$target/.prepared"
  say "generated typedoc-three: $(find "$target" -name '*.html' | wc -l) pages ($stamp)"
fi

# 3. JSDoc over commander.
stamp="jsdoc@$JSDOC_VERSION commander@$COMMANDER_VERSION"
target="$OUT/jsdoc-commander"
if current "$stamp" "$target"; then
  say "jsdoc-commander is current ($stamp)"
else
  npm_scratch jsdoc "jsdoc@$JSDOC_VERSION" "commander@$COMMANDER_VERSION"
  cat >"$BUILD/jsdoc/jsdoc.json" <<'JSON'
{"source": {"include": ["node_modules/commander/lib"]}, "opts": {"recurse": true}}
JSON
  rm -rf "$target"
  # JSDoc reports the TypeScript-only type expressions of lib/help.js (`import("./x.js").X`) as errors and
  # leaves those comments out; the rest is documented, so its exit status is not fatal here.
  (cd "$BUILD/jsdoc" && npx --no-install jsdoc -c jsdoc.json -d "$target" >/dev/null 2>"$BUILD/jsdoc/errors.log") || true
  if [[ ! -f "$target/index.html" ]]; then
    echo "prepare: JSDoc wrote nothing; see $BUILD/jsdoc/errors.log" >&2
    exit 1
  fi
  printf '%s' "$stamp" >"$target/.prepared"
  say "generated jsdoc-commander: $(find "$target" -name '*.html' | wc -l) pages," \
      "$(grep -c '^ERROR' "$BUILD/jsdoc/errors.log" || true) comments JSDoc could not parse ($stamp)"
fi

# 4. Starlette's MkDocs sources.
stamp="starlette==$STARLETTE_VERSION sdist docs/**/*.md"
target="$OUT/markdown-starlette"
if current "$stamp" "$target"; then
  say "markdown-starlette is current ($stamp)"
else
  mkdir -p "$BUILD/pypi"
  sdist="$BUILD/pypi/starlette-$STARLETTE_VERSION.tar.gz"
  if [[ ! -f "$sdist" ]]; then
    "$PYTHON" -m pip download --quiet --no-binary :all: --no-deps \
      "starlette==$STARLETTE_VERSION" -d "$BUILD/pypi"
  fi
  rm -rf "$target" "$BUILD/pypi/starlette-$STARLETTE_VERSION"
  tar -xzf "$sdist" -C "$BUILD/pypi"
  (cd "$BUILD/pypi/starlette-$STARLETTE_VERSION/docs" && find . -name '*.md' -print0 |
     while IFS= read -r -d '' page; do mkdir -p "$target/$(dirname "$page")"; cp "$page" "$target/$page"; done)
  printf '%s' "$stamp" >"$target/.prepared"
  say "copied markdown-starlette: $(find "$target" -name '*.md' | wc -l) pages ($stamp)"
fi

say "references under $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
