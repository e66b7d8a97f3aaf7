"""DyKnow's files fetched into the cache (``evolve-data fetch-data dyknow``), and where ``data=dyknow`` finds them.

Nothing of DyKnow ships with the project. :func:`fetch` downloads the files of DyKnow's public repository
(``sislab-unitn/DyKnow``, MIT licence) at a pinned commit, checks each file's sha256, and writes them into
``<cache>/data/dyknow/`` — the cache root of ``evolve-data fetch-model``: ``--cache-dir``, else
``$EVOLVE_TRAIN_CACHE``, else ``~/.cache/evolve-train``. ``data=dyknow`` without ``data.root`` reads that
directory (:func:`default_root`).

For a machine without network, ``--from PATH`` copies a copy you have: a directory holding the files, or
``grc_generated.json`` itself (``qa_generated.json`` and ``passages.json`` are then taken from beside it). A
copy need not be byte-identical to the release: it is accepted when every category it holds equals the
release's category of that name (its JSON, in the file's order, hashes to the pinned sha256 of that
category), so a copy re-indented or with some categories left out passes, an edited one does not.

The directory is built under a temporary name and renamed into place, so an interrupted fetch leaves no
half-fetched copy; ``SOURCE.json`` in it records where each file came from.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from evolve_train.data.loaders.dyknow_facts import FACTS_FILE, PASSAGES_FILE, QA_FILE
from evolve_train.errors import DataError
from evolve_train.utils.io import discard, publish, tmp_path

REPOSITORY = "sislab-unitn/DyKnow"
COMMIT = "1182dd89b981d32b41eecc473c9ebebc75366e69"
"""The pinned commit of DyKnow's repository (the files below are those of this commit)."""
SOURCE_FILE = "SOURCE.json"
"""Written last into a fetched directory: the repository, commit and, per file, its origin and sha256."""
CACHE_ENV = "EVOLVE_TRAIN_CACHE"
FETCH_HINT = (
    "fetch it with `evolve-data fetch-data dyknow` (downloads DyKnow's files from GitHub), or "
    "`evolve-data fetch-data dyknow --from DIR_OR_FILE` from a copy on a machine without network, "
    "or point data.root at a directory holding grc_generated.json"
)


@dataclass(frozen=True)
class ReleaseFile:
    name: str
    """File name in the fetched directory (what the loader reads)."""
    path: str
    """Path in the repository."""
    sha256: str
    """sha256 of the file at :data:`COMMIT`."""
    categories: dict[str, str]
    """Category -> sha256 of its compact JSON (``separators=(",", ":")``, non-ASCII kept, the file's order)."""
    required: bool
    """``grc_generated.json`` is; the others add question forms (``qa_questions``) and passages."""

    @property
    def url(self) -> str:
        return f"https://raw.githubusercontent.com/{REPOSITORY}/{COMMIT}/{self.path}"


FILES: tuple[ReleaseFile, ...] = (
    ReleaseFile(
        FACTS_FILE,
        "grc_generated.json",
        "8f5a8b8af4e9b62333ede181ae96d24182701f48873291042ceb70f305db7f99",
        {
            "countries_byGDP": "6cbbcf6defcfee4249c5fcb38ea7c562e06d8ef5db6a43bde3e4f4b03d27466d",
            "athletes_byPayment": "bff0f4882ce6c9160c87258ee52120444b16d3a738f67df683d1ce580c41e28f",
            "companies_byRevenue": "a1f5521c6f07b72505df3dd9af3080008f871b3852f9a1e3ea51a53c411ca18b",
            "organizations": "04d535d51f710a5471fe44ed7b6c026b777ec33643080eb5e31b485936af1daa",
        },
        required=True,
    ),
    ReleaseFile(
        QA_FILE,
        "qa_generated.json",
        "93df5a01f1b2916b11b8ed6472a80d51d6d55dc13f60408eb026cc960123f4bc",
        {
            "countries_byGDP": "458de8251f8c6647ee0dec8556ce4ecde4eab10eab8fd8d8e581bd4b582e2c1e",
            "athletes_byPayment": "26542720a480a87377ed4f91275b8756bb11bb59526074a99d5692138a026fef",
            "companies_byRevenue": "60c32cc8e52d2badad4c14e2be50472aa470bd82063b99b26399702a243ee39b",
            "organizations": "b3b162cd237997666046e3ff535ea03e452c2c1439903db67c7d5fecf4b27df2",
        },
        required=False,
    ),
    ReleaseFile(
        PASSAGES_FILE,
        "RAG/passages.json",
        "35c0d76432949b4042510e5d9cd0c67624b4ab9d5b30de8843f243f319cc61c1",
        {
            "countries_byGDP": "00eb53fa4d08f66c30a282e6f44c7377d8b083370d8d34e76ff3d91cf2e95634",
            "athletes_byPayment": "5113d5e663a2ec26cac046ff2d93d22ef23ad280006a3e570371aa276ff16608",
            "companies_byRevenue": "6deb235a12e5e61e9a111f55c97d01b15f99ab34c369cf33b1e1e959fb142183",
            "organizations": "d350bb506d3b4821d60f93e23d2a033137bc4a20e217df79280b3dea995391b5",
        },
        required=False,
    ),
)
LICENSE = ReleaseFile(
    "LICENSE", "LICENSE", "b4dee325946851d2d9fd5bfea33cd2f4271454cd1f4e875791bb4b14f7b88d87", {}, required=False
)
"""DyKnow's MIT licence, fetched beside the data (its notice must accompany copies)."""


def cache_root(cache_dir: Optional[str | Path] = None) -> Path:
    """``cache_dir``, else ``$EVOLVE_TRAIN_CACHE``, else ``~/.cache/evolve-train`` (as ``fetch-model``)."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "evolve-train"


def default_root(cache_dir: Optional[str | Path] = None) -> Path:
    """Where ``evolve-data fetch-data dyknow`` puts DyKnow's files, and where ``data=dyknow`` reads them by default."""
    return cache_root(cache_dir) / "data" / "dyknow"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def category_digest(value) -> str:
    """sha256 of one category's compact JSON (the file's order kept: it decides the loader's order)."""
    return hashlib.sha256(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")).hexdigest()


def verify(path: Path, spec: ReleaseFile) -> str:
    """How ``path`` matches the release's ``spec``: ``"the release file"`` (same sha256) or ``"categories ...
    of the release"`` (each category equal to the release's); anything else raises DataError naming why."""
    if sha256_of(path) == spec.sha256:
        return "the release file"
    if not spec.categories:
        raise DataError(f"sha256 {sha256_of(path)} is not the pinned {spec.sha256} of {spec.path}", file=str(path))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"not JSON ({err}): not DyKnow's {spec.name}", file=str(path)) from None
    if not isinstance(data, dict) or not data:
        raise DataError(f"expected DyKnow's {spec.name} (an object of categories)", file=str(path))
    for category, value in data.items():
        pinned = spec.categories.get(category)
        if pinned is None:
            raise DataError(
                f"category {category!r} is not one of the release's ({', '.join(spec.categories)}) at "
                f"{REPOSITORY}@{COMMIT[:7]}",
                file=str(path),
            )
        if category_digest(value) != pinned:
            raise DataError(
                f"category {category!r} differs from the release's ({REPOSITORY}@{COMMIT[:7]} {spec.path}): "
                "an edited copy is not DyKnow's; use data.root=DIR to train on it as your own data",
                file=str(path),
            )
    return f"categories {', '.join(data)} of the release"


def is_fetched(directory: Path) -> bool:
    return (directory / SOURCE_FILE).is_file() and (directory / FACTS_FILE).is_file()


def _download(spec: ReleaseFile, into: Path, timeout: float) -> None:
    try:
        with urllib.request.urlopen(spec.url, timeout=timeout) as response, open(into, "wb") as handle:
            shutil.copyfileobj(response, handle)
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise DataError(
            f"could not download {spec.url} ({reason}); on a machine without network copy a DyKnow copy with "
            "`evolve-data fetch-data dyknow --from DIR_OR_FILE`"
        ) from None


def _sources(source: Path) -> dict[str, Path]:
    """File name -> path of each release file found in ``source`` (a directory, or grc_generated.json itself)."""
    source = source.expanduser()
    if not source.exists():
        raise DataError("missing file: --from does not exist", file=str(source))
    facts = source / FACTS_FILE if source.is_dir() else source
    if not facts.is_file():
        raise DataError(f"missing file: DyKnow's {FACTS_FILE} is not in --from", file=str(facts))
    beside = facts.parent
    found = {FACTS_FILE: facts}
    for name, candidates in (
        (QA_FILE, [QA_FILE]),
        (PASSAGES_FILE, [PASSAGES_FILE, f"RAG/{PASSAGES_FILE}"]),
        (LICENSE.name, [LICENSE.name]),
    ):
        for candidate in candidates:
            if (beside / candidate).is_file():
                found[name] = beside / candidate
                break
    return found


def fetch(
    cache_dir: Optional[str | Path] = None,
    source: Optional[Path] = None,
    say: Callable[[str], None] = print,
    timeout: float = 60.0,
) -> Path:
    """Fetch DyKnow's files into :func:`default_root` (downloaded, or copied from ``source``); returns the
    directory. A directory fetched before is replaced only when this fetch succeeds."""
    target = default_root(cache_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(target)
    discard(tmp)
    tmp.mkdir()
    record: dict = {"repository": REPOSITORY, "commit": COMMIT, "license": "MIT", "files": {}}
    try:
        found = _sources(source) if source is not None else {}
        for spec in (*FILES, LICENSE):
            out = tmp / spec.name
            if source is None:
                say(f"dyknow: downloading {spec.url}")
                _download(spec, out, timeout)
                origin = spec.url
            elif spec.name in found:
                shutil.copyfile(found[spec.name], out)
                origin = str(found[spec.name].resolve())
            else:
                if spec.required:  # (found always has it: _sources raises first)
                    raise DataError(f"missing file: {spec.name}", file=str(source))
                say(f"dyknow: {spec.name} not beside {found[FACTS_FILE]}: not fetched")
                continue
            try:
                how = verify(out, spec)
            except DataError:
                if spec.required or spec is not LICENSE or source is None:
                    raise
                out.unlink()  # a copy's licence file with other bytes: the data are still checked
                say(f"dyknow: {spec.name} beside the copy is not the release's: not copied")
                continue
            say(f"dyknow: {spec.name}: {how} (sha256 checked)")
            record["files"][spec.name] = {"from": origin, "sha256": sha256_of(out), "matches": how}
        (tmp / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        publish(tmp, target)  # the one atomic writer (utils/io.py): fsync, replace what was there
    finally:
        discard(tmp)
    say(f"dyknow: {len(record['files'])} files -> {target} (data=dyknow reads them there)")
    return target


def missing_hint(root: Path, default: bool) -> str:
    """The message of a DyKnow directory without ``grc_generated.json``."""
    where = f"the fetched copy's place {root}" if default else f"data.root ({root})"
    return f"DyKnow's {FACTS_FILE} not found in {where}: {FETCH_HINT}"
