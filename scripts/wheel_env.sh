# Shell functions shared by wheel_check.sh, floors.sh and pythons.sh (source it; not a command):
# find an interpreter, build the wheel and sdist, make a clean virtualenv from the wheel, and
# run the README's three quick-starts against it from outside the checkout.

# The interpreter for Python X.Y: python3.X on the PATH, else pyenv's build of it. Prints its
# path; fails when there is none (a pyenv shim for a version not selected does not count).
find_python() {
    local want="$1" candidate
    local -a candidates=("python$want")
    if command -v pyenv >/dev/null 2>&1; then
        candidates+=("$(pyenv root)"/versions/"$want".*/bin/"python$want")
    fi
    for candidate in "${candidates[@]}"; do
        if "$candidate" -c "import sys; sys.exit(f'{sys.version_info[0]}.{sys.version_info[1]}' != '$want')" \
            >/dev/null 2>&1; then
            command -v "$candidate" || echo "$candidate"
            return 0
        fi
    done
    echo "no Python $want interpreter (python$want, or pyenv install $want)" >&2
    return 1
}

# build_dist DEV_PYTHON OUTDIR: the wheel and the sdist of the checkout, into OUTDIR.
build_dist() {
    "$1" -m build --outdir "$2" . >"$2.log" 2>&1 || { cat "$2.log"; return 1; }
    ls "$2"/lifecycle_machines-*.whl >/dev/null
}

# pip_quiet VENV ARGS...: pip install, printing pip's output only when it fails.
pip_quiet() {
    local venv="$1"; shift
    "$venv/bin/pip" install --quiet "$@" >"$venv.pip.log" 2>&1 || {
        grep -v "^WARNING: Location" "$venv.pip.log" | tail -40; return 1; }
}

# make_env PYTHON VENV: a clean virtualenv with a current pip (for --group).
make_env() {
    rm -rf "$2"
    "$1" -m venv "$2"
    pip_quiet "$2" --upgrade pip
}

# from_wheel VENV: fail unless `import lifecycle` there resolves to the installed wheel, under
# the distribution's name, at the version the package itself reports.
from_wheel() {
    (cd "$(dirname "$1")" && "$1/bin/python" - "$1" <<'PY'
import importlib.metadata as md, os, sys
import lifecycle
where = os.path.realpath(lifecycle.__file__)
assert where.startswith(os.path.realpath(sys.argv[1])), f"lifecycle imported from {where}"
assert md.version("lifecycle-machines") == lifecycle.__version__, md.version("lifecycle-machines")
PY
    )
}

# quickstarts VENV WORKDIR: the three quick-starts, run from WORKDIR (outside the checkout),
# so `import lifecycle` can only find the wheel.
quickstarts() {
    local venv="$1" work="$2"
    mkdir -p "$work"
    cp -r examples "$work/"
    from_wheel "$venv"
    (
        cd "$work"
        export PATH="$venv/bin:$PATH"
        python examples/quickstart_controller.py >/dev/null
        python -m pytest -q -p no:cacheprovider examples/quickstart_property_test.py
        mkdir -p "$work/operator"
        bash examples/quickstart_operator.sh "$work/operator" >/dev/null
        lifecycle machines >/dev/null
        lifecycle --help >/dev/null
    )
    echo "quick-starts: ok ($("$venv/bin/python" -c 'import sys; print(sys.version.split()[0])'))"
}
