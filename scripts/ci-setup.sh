#!/usr/bin/env bash
# CI set-up for the Harbor engine and the Docker sandbox, one step per argument, each timed:
#   scripts/ci-setup.sh harbor        Harbor's own venv (Python 3.12, harbor==0.25.0) in the cache
#   scripts/ci-setup.sh mirror        print the Debian mirror apt uses here (what debootstrap gets)
#   scripts/ci-setup.sh browser       Debian's chromium + chromium-driver (the report page's
#                                     browser test; no browser download)
#   scripts/ci-setup.sh docker        docker.io + debootstrap, dockerd started, base image built
#                                     offline from a debootstrap rootfs (cached between runs),
#                                     and the task images of tasks/terminal (FROM the base image)
# Nothing is pulled from a registry; Debian's packages are the only download.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${VENV:-.venv}/bin"
IMAGE="${RSIFRAME_DOCKER_IMAGE:-rsiframe-base:bookworm}"

step() {
    local name=$1; shift
    local t0=$SECONDS
    "$@"
    echo "ci-setup: $name took $((SECONDS - t0)) s" >&2
}

harbor_venv() {
    "$BIN/python" -c 'from rsiframe.evaluators.harbor import venv; print(venv.python())'
}

docker_engine() {
    "$BIN/pip" install --quiet --disable-pip-version-check -e '.[docker]'  # the docker SDK
    # jq and bc: tasks/terminal's json-extract and csv-sum add them to their Docker image;
    # the bwrap and process sandboxes (the oracle on the local and harbor engines) use the host's
    if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null \
        || ! command -v jq >/dev/null || ! command -v bc >/dev/null; then
        scripts/apt-get.sh update -qq >/dev/null
        scripts/apt-get.sh install -y -qq docker.io debootstrap jq bc >/dev/null
    fi
    if ! docker info >/dev/null 2>&1; then
        (nohup dockerd >/var/log/rsiframe-dockerd.log 2>&1 &)
        for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
        docker info >/dev/null
    fi
}

# The machine's own Debian mirror, as apt is configured here: deb822 files
# (sources.list.d/*.sources), one-line files (sources.list.d/*.list) and sources.list, read
# only where they exist (a fresh Debian 12 machine has only the deb822 file). RSIFRAME_APT_ETC
# points it elsewhere (tests).
debian_mirror() {
    local etc=${RSIFRAME_APT_ETC:-/etc/apt} f files=() mirror=""
    for f in "$etc"/sources.list.d/*.sources "$etc"/sources.list.d/*.list "$etc"/sources.list; do
        [ -f "$f" ] && files+=("$f")
    done
    if [ ${#files[@]} -gt 0 ]; then
        mirror=$(sed -nE 's/^URIs:[[:space:]]*([^[:space:]]+\/debian)\/?([[:space:]].*)?$/\1/p; s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+\/debian)\/?[[:space:]].*/\2/p' \
            "${files[@]}")
        mirror=${mirror%%$'\n'*}  # the first one (no `head` in a pipe under pipefail)
    fi
    if [ -z "$mirror" ]; then
        echo "ci-setup: no Debian mirror configured for apt (looked in $etc/sources.list.d/*.sources, *.list and $etc/sources.list)" >&2
        return 1
    fi
    echo "$mirror"
}

docker_image() {
    if docker image inspect "$IMAGE" >/dev/null 2>&1; then
        echo "ci-setup: $IMAGE is cached" >&2
        return
    fi
    local rootfs mirror
    mirror=$(debian_mirror) || exit 1
    rootfs=$(mktemp -d /var/tmp/rsiframe-rootfs.XXXXXX)
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >/dev/null
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import -c 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
    rm -rf "$rootfs"
}

task_images() {
    # each task whose environment/Dockerfile adds Debian packages, built FROM the base image
    # (rsiframe-task:<digest>, reused when present); the same code the docker sandbox uses
    "$BIN/python" - <<'PY'
from pathlib import Path

from rsiframe.sandbox.taskimage import preflight

root = Path("tasks/terminal")
preflight({p.name: p for p in sorted(root.iterdir()) if (p / "task.toml").is_file()})
PY
}

browser() {
    if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
        scripts/apt-get.sh update -qq >/dev/null
        scripts/apt-get.sh install -y -qq chromium chromium-driver >/dev/null
    fi
    chromium --version
}

for what in "$@"; do
    case $what in
        harbor) step "harbor venv" harbor_venv ;;
        mirror) debian_mirror ;;
        browser) step "browser" browser ;;
        docker)
            step "docker engine" docker_engine
            step "docker base image" docker_image
            step "docker task images" task_images
            ;;
        *) echo "ci-setup: unknown step $what" >&2; exit 2 ;;
    esac
done
