#!/usr/bin/env python3
"""Generate tasks/terminal: small Terminal-Bench-style Harbor tasks (shell and file work).

``python3 tasks/terminal/generate.py`` rewrites every task folder from the table below.
Each task has ``task.toml``, ``instruction.md``, ``environment/`` (a Dockerfile that only
copies the inputs into ``/app`` and, for some, adds Debian packages; plus the inputs),
``solution/solve.sh`` (the oracle: it scores 1.0) and ``tests/test.sh``. No task needs the
network. Paths also work through rsiframe's ``RSI_*`` variables, so the ``local`` engine's
process fallback runs them too. A check that runs the agent's own code (``fix-script``)
runs it through ``confine.py`` (Landlock: no read of the tests, no write of the reward);
where it cannot be confined (no Landlock; the process fallback, whose tests lie under an
allowed folder) it is not run and the task scores 0.
"""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

HERE = Path(__file__).resolve().parent

TASK_TOML = """\
version = "1.0"

[metadata]
author_name = "rsiframe"
difficulty = "easy"
category = "{category}"
tags = ["shell", "files"]

[verifier]
timeout_sec = 60.0

[agent]
timeout_sec = 120.0

[environment]
workdir = "/app"
network_mode = "no-network"
"""

DOCKERFILE = """\
FROM debian:bookworm-slim
{packages}WORKDIR /app
COPY . /app
"""

#: Debian packages a task's image adds (its Dockerfile only adds packages, so the docker
#: sandbox builds it offline FROM rsiframe-base:bookworm; see rsiframe/sandbox/taskimage.py).
#: The bwrap and process sandboxes use the host's own tools: keep these installed there.
PACKAGES = {"json-extract": ["jq"], "csv-sum": ["bc"]}

INSTALL = (
    "RUN apt-get update && apt-get install -y --no-install-recommends {names} \\\n"
    "    && rm -rf /var/lib/apt/lists/*\n"
)

TEST_SH = """\
#!/bin/bash
# reward 1 when the check below passes in the work folder, else 0
APP="${{RSI_APP:-/app}}"
OUT="${{RSI_LOGS:-/logs}}/verifier"
mkdir -p "$OUT"
cd "$APP" || {{ echo 0 > "$OUT/reward.txt"; exit 0; }}
check() {{
{check}
}}
if check; then echo 1 > "$OUT/reward.txt"; echo pass; else echo 0 > "$OUT/reward.txt"; echo fail; fi
exit 0
"""

SOLVE_SH = """\
#!/bin/bash
set -e
cd "${{RSI_APP:-/app}}"
{solve}
"""

WORDS = [
    "pear",
    "apple",
    "fig",
    "apple",
    "kiwi",
    "pear",
    "plum",
    "fig",
    "apple",
    "banana",
    "kiwi",
    "cherry",
]
LOG = "\n".join(
    f"2024-05-0{1 + i % 9} 12:0{i % 10}:00 {'ERROR' if i % 4 == 1 else 'INFO'} event {i}"
    for i in range(37)
)

#: name -> (category, instruction, inputs {path: text}, solve, check)
TASKS: dict[str, tuple[str, str, dict[str, str], str, str]] = {
    "hello-file": (
        "files",
        "Create the file `/app/hello.txt` containing exactly the line `Hello, world!`.",
        {},
        "echo 'Hello, world!' > hello.txt",
        '[ "$(cat hello.txt)" = "Hello, world!" ]',
    ),
    "count-lines": (
        "text",
        "Write the number of lines of `/app/data.txt` (just the number) to `/app/count.txt`.",
        {"data.txt": "".join(f"row {i}\n" for i in range(23))},
        "wc -l < data.txt | tr -d ' ' > count.txt",
        '[ "$(tr -d " \\n" < count.txt)" = "23" ]',
    ),
    "sort-unique": (
        "text",
        "Write the distinct words of `/app/words.txt` (one per line in the input), sorted "
        "alphabetically, one per line, to `/app/sorted.txt`.",
        {"words.txt": "\n".join(WORDS) + "\n"},
        "sort -u words.txt > sorted.txt",
        '[ "$(cat sorted.txt)" = '
        '"$(printf "apple\\nbanana\\ncherry\\nfig\\nkiwi\\npear\\nplum")" ]',
    ),
    "csv-sum": (
        "data",
        "`/app/sales.csv` has a header row and an `amount` column. Write the sum of that "
        "column (an integer) to `/app/total.txt`.",
        {"sales.csv": "id,item,amount\n1,pen,12\n2,ink,30\n3,pad,7\n4,pen,51\n"},
        "tail -n +2 sales.csv | cut -d, -f3 | paste -sd+ | bc > total.txt",
        '[ "$(tr -d " \\n" < total.txt)" = "100" ]',
    ),
    "rename-ext": (
        "files",
        "Rename every `.jpeg` file in `/app/images` to the same name with `.jpg`.",
        {"images/a.jpeg": "a", "images/b.jpeg": "b", "images/c.png": "c"},
        'for f in images/*.jpeg; do mv "$f" "${f%.jpeg}.jpg"; done',
        "[ -f images/a.jpg ] && [ -f images/b.jpg ] && [ -f images/c.png ] && "
        "! ls images/*.jpeg >/dev/null 2>&1",
    ),
    "find-largest": (
        "files",
        "Write the name (not the path) of the largest file in `/app/files` to `/app/largest.txt`.",
        {"files/small.bin": "x" * 10, "files/big.bin": "x" * 900, "files/mid.bin": "x" * 300},
        "ls -S files | head -n1 > largest.txt",
        '[ "$(tr -d "\\n" < largest.txt)" = "big.bin" ]',
    ),
    "replace-text": (
        "text",
        "Replace every `foo` with `bar` in all `.txt` files under `/app/docs`; leave other "
        "files alone.",
        {
            "docs/a.txt": "foo and foo\n",
            "docs/sub/b.txt": "no foo here? foo!\n",
            "docs/c.md": "foo\n",
        },
        "find docs -name '*.txt' -exec sed -i 's/foo/bar/g' {} +",
        "! grep -rq foo --include='*.txt' docs && grep -q 'bar and bar' docs/a.txt && "
        "grep -q foo docs/c.md",
    ),
    "run-script": (
        "shell",
        "Make `/app/run.sh` executable, run it, and save what it prints to `/app/out.txt`.",
        {"run.sh": "#!/bin/sh\necho ran-$((6 * 7))\n"},
        "chmod +x run.sh && ./run.sh > out.txt",
        '[ -x run.sh ] && [ "$(cat out.txt)" = "ran-42" ]',
    ),
    "json-extract": (
        "data",
        "Write the value of `server.port` in `/app/config.json` to `/app/port.txt`.",
        {"config.json": '{"server": {"host": "localhost", "port": 8431}, "debug": false}\n'},
        "jq -r .server.port config.json > port.txt",
        '[ "$(tr -d " \\n" < port.txt)" = "8431" ]',
    ),
    "make-archive": (
        "files",
        "Create the gzip-compressed tar archive `/app/backup.tar.gz` holding the folder `docs` "
        "(paths inside start with `docs/`).",
        {"docs/one.txt": "1\n", "docs/two.txt": "2\n"},
        "tar -czf backup.tar.gz docs",
        "tar -tzf backup.tar.gz | grep -qx 'docs/one.txt' && "
        "tar -tzf backup.tar.gz | grep -qx 'docs/two.txt'",
    ),
    "dedupe-lines": (
        "text",
        "Write the lines of `/app/list.txt` to `/app/unique.txt` without duplicates, keeping "
        "the first occurrence of each line in its original order.",
        {"list.txt": "b\na\nb\nc\na\nd\n"},
        "awk '!seen[$0]++' list.txt > unique.txt",
        '[ "$(cat unique.txt)" = "$(printf "b\\na\\nc\\nd")" ]',
    ),
    "top-word": (
        "text",
        "Write the most frequent word of `/app/text.txt` (words are separated by spaces) to "
        "`/app/top.txt`.",
        {"text.txt": " ".join(WORDS) + "\n"},
        "tr ' ' '\\n' < text.txt | grep -v '^$' | sort | uniq -c | sort -rn | head -n1 "
        "| awk '{print $2}' > top.txt",
        '[ "$(tr -d " \\n" < top.txt)" = "apple" ]',
    ),
    "fix-script": (
        "shell",
        "`/app/greet.sh` has a syntax error. Fix it so that `bash /app/greet.sh` prints `ok`.",
        {"greet.sh": "#!/bin/bash\nif [ 1 -eq 1 ]\n  echo ok\nfi\n"},
        "printf '#!/bin/bash\\nif [ 1 -eq 1 ]; then\\n  echo ok\\nfi\\n' > greet.sh",
        # the agent's script runs confined (confine.py): it can neither read the tests nor
        # write the reward, which it could otherwise (rsiframe tasks audit: planted)
        '[ "$(python3 "${RSI_TESTS:-/tests}/confine.py" "${RSI_TESTS:-/tests}" "$OUT" -- '
        'bash greet.sh 2>/dev/null)" = "ok" ]',
    ),
    "make-symlink": (
        "files",
        "Create the symbolic link `/app/latest` pointing to `releases/v3` (a relative link).",
        {"releases/v1/VERSION": "1\n", "releases/v3/VERSION": "3\n"},
        "ln -sfn releases/v3 latest",
        '[ -L latest ] && [ "$(readlink latest)" = "releases/v3" ] && '
        '[ "$(cat latest/VERSION)" = 3 ]',
    ),
    "ini-to-env": (
        "data",
        "Write the keys of the `[main]` section of `/app/settings.ini` as `KEY=value` lines "
        "(key upper-cased, in file order) to `/app/.env`.",
        {"settings.ini": "[main]\nhost = db.local\nport = 5432\n\n[other]\nx = 1\n"},
        "awk -F' = ' '/^\\[/{s=$0; next} s==\"[main]\" && NF==2 {print toupper($1)\"=\"$2}' "
        "settings.ini > .env",
        '[ "$(cat .env)" = "$(printf "HOST=db.local\\nPORT=5432")" ]',
    ),
    "count-errors": (
        "text",
        "Write the number of lines of `/app/app.log` that contain `ERROR` to `/app/errors.txt`.",
        {"app.log": LOG + "\n"},
        "grep -c ERROR app.log > errors.txt",
        '[ "$(tr -d " \\n" < errors.txt)" = "9" ]',
    ),
    "make-tree": (
        "files",
        "Create the folders `/app/a/b/c` and `/app/a/d`, and an empty file `/app/a/d/keep`.",
        {},
        "mkdir -p a/b/c a/d && : > a/d/keep",
        "[ -d a/b/c ] && [ -f a/d/keep ] && [ ! -s a/d/keep ]",
    ),
    "private-file": (
        "shell",
        "Make `/app/secret.txt` readable and writable by its owner only (mode 600).",
        {"secret.txt": "s3cret\n"},
        "chmod 600 secret.txt",
        '[ "$(stat -c %a secret.txt)" = "600" ]',
    ),
    "reverse-lines": (
        "text",
        "Write the lines of `/app/lines.txt` in reverse order to `/app/reversed.txt`.",
        {"lines.txt": "first\nsecond\nthird\n"},
        "tac lines.txt > reversed.txt",
        '[ "$(cat reversed.txt)" = "$(printf "third\\nsecond\\nfirst")" ]',
    ),
    "extract-archive": (
        "files",
        "Unpack `/app/bundle.tar` into the folder `/app/out` (create it).",
        {},
        "mkdir -p out && tar -xf bundle.tar -C out",
        '[ "$(cat out/note.txt)" = "unpacked" ]',
    ),
}


def _write(path: Path, text: str, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if executable:
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _bundle(dest: Path) -> None:
    """bundle.tar for extract-archive, built deterministically."""
    import io
    import tarfile

    data = b"unpacked\n"
    info = tarfile.TarInfo("note.txt")
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        tf.addfile(info, io.BytesIO(data))
    dest.write_bytes(buf.getvalue())


def main() -> None:
    for name, (category, instruction, inputs, solve, check) in TASKS.items():
        root = HERE / name
        shutil.rmtree(root, ignore_errors=True)
        _write(root / "task.toml", TASK_TOML.format(category=category))
        _write(root / "instruction.md", instruction + "\n")
        names = " ".join(PACKAGES.get(name, []))
        install = INSTALL.format(names=names) if names else ""
        _write(root / "environment" / "Dockerfile", DOCKERFILE.format(packages=install))
        for rel, text in inputs.items():
            _write(root / "environment" / rel, text)
        if name == "extract-archive":
            _bundle(root / "environment" / "bundle.tar")
        _write(root / "solution" / "solve.sh", SOLVE_SH.format(solve=solve), executable=True)
        check_body = "\n".join("  " + line for line in check.splitlines())
        _write(root / "tests" / "test.sh", TEST_SH.format(check=check_body), executable=True)
        if "confine.py" in check:  # a check that runs the agent's code runs it confined
            shutil.copy(HERE / "confine.py", root / "tests" / "confine.py")
    print(f"wrote {len(TASKS)} tasks under {HERE}")


if __name__ == "__main__":
    main()
