"""A RAG strategy's index: documents found, cut into chunks, kept in an SQLite file.

Everything here is synchronous (run in a worker thread by ``_rag.py``); each call opens and
closes its own connection, and one file's chunks are replaced in one transaction, so two
runtimes indexing the same file leave it whole. A file is re-read only when its size or
mtime changed, and re-indexed only when its SHA-256 changed. The ``meta`` row holds what the
index was built with (strategy, model, dimensions, chunking): when that changes the index is
emptied and built again.

Vector search runs in SQLite with the ``sqlite-vec`` extension (``vec_distance_cosine`` over
the stored blobs, see :meth:`IndexStore.nearest`) when it loads, else by the exact scan in
Python; both give the same hits in the same order (decision 0033).
"""

from __future__ import annotations

import glob
import hashlib
import logging
import math
import os
import re
import sqlite3
from array import array
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import attrs
import pathspec

from .._rag_config import RagChunking

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 4 * 1024 * 1024
"""Bigger files are left out of an index (logged), as are files that look binary."""
_GLOB = re.compile(r"[*?\[]")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY, sha256 TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    path TEXT NOT NULL, idx INTEGER NOT NULL, content TEXT NOT NULL, vector BLOB,
    PRIMARY KEY (path, idx)
);
"""


@attrs.frozen
class Hit:
    """One chunk found by a query, with the strategy's (or fusion's) score."""

    path: str
    index: int
    content: str
    score: float

    @property
    def key(self) -> tuple[str, int]:
        return (self.path, self.index)


@attrs.frozen
class FileState:
    path: str
    size: int
    mtime_ns: int


# --- chunking -----------------------------------------------------------------------------------


def chunk_text(text: str, chunking: RagChunking) -> list[str]:
    """``text`` cut into pieces of at most ``size`` characters, each starting ``overlap``
    characters before the previous one ended; with ``respect_word_boundaries`` a cut moves
    back to the nearest whitespace (searched over a fifth of ``size``, 50 to 500 characters)
    and a piece starts at a word (unless that word is longer than the overlap). Blank pieces
    are dropped; pieces are stripped."""
    size = max(chunking.size, 1)
    overlap = max(chunking.overlap, 0) if chunking.overlap < size else size // 2
    pieces: list[str] = []
    start, total = 0, len(text)
    while start < total:
        end = min(start + size, total)
        if chunking.respect_word_boundaries and end < total:
            floor = end - min(max(size // 5, 50), 500)
            cut = end
            while cut > max(start, floor) and not text[cut].isspace():
                cut -= 1
            if cut > start and text[cut].isspace():
                end = cut
        piece = text[start:end].strip()
        if piece:
            pieces.append(piece)
        if end >= total:
            break
        nxt = max(end - overlap, start + 1)
        if chunking.respect_word_boundaries and not text[nxt - 1].isspace():
            word_end = nxt
            while word_end < min(end + 1, total) and not text[word_end].isspace():
                word_end += 1
            if word_end < total and text[word_end].isspace():
                nxt = word_end  # else a word longer than the overlap: cut inside it
        while chunking.respect_word_boundaries and nxt < total and text[nxt].isspace():
            nxt += 1
        start = nxt
    return pieces


# --- finding documents ---------------------------------------------------------------------------


def _spec(folder: Path) -> pathspec.GitIgnoreSpec | None:
    """The rules of ``folder/.gitignore`` (None: no such file)."""
    try:
        lines = (folder / ".gitignore").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines.splitlines())


class Ignored:
    """``.gitignore`` rules as git reads them: each ``.gitignore`` from the file's directory up
    to the top of its git repository applies (relative to its own directory); outside a
    repository, those up to the listed directory (cached per directory)."""

    def __init__(self) -> None:
        self._specs: dict[Path, pathspec.GitIgnoreSpec | None] = {}
        self._repos: dict[Path, Path | None] = {}

    def _cached(self, folder: Path) -> pathspec.GitIgnoreSpec | None:
        if folder not in self._specs:
            self._specs[folder] = _spec(folder)
        return self._specs[folder]

    def _repo(self, folder: Path) -> Path | None:
        if folder not in self._repos:
            repos = [p for p in (folder, *folder.parents) if (p / ".git").exists()]
            self._repos[folder] = repos[0] if repos else None
        return self._repos[folder]

    def __call__(self, path: Path, listed: Path | None) -> bool:
        top = self._repo(path.parent) or listed or path.parent
        for folder in (path.parent, *path.parent.parents):
            spec = self._cached(folder)
            if spec is not None and spec.match_file(path.relative_to(folder).as_posix()):
                return True
            if folder == top or folder == folder.parent:
                break
        return False


def _walk(root: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                yield Path(folder) / name


def collect_files(docs: Iterable[str], respect_vcs: bool = True) -> list[FileState]:
    """The files ``docs`` name (files, directories walked, ``**`` globs), text only. With
    ``respect_vcs`` walked and globbed files that ``.gitignore`` rules exclude are left out
    (see :class:`Ignored`); a file named on its own is always taken."""
    found: dict[str, FileState] = {}
    ignored = Ignored() if respect_vcs else None
    for doc in docs:
        candidates: Iterable[Path]
        listed: Path | None = None
        if _GLOB.search(doc):
            candidates = (Path(p) for p in sorted(glob.glob(doc, recursive=True)))
        elif os.path.isdir(doc):
            listed = Path(doc)
            candidates = _walk(listed)
        else:
            candidates = [Path(doc)]
        for path in candidates:
            try:
                stat = path.stat()
            except OSError:
                continue
            if not path.is_file() or stat.st_size > MAX_FILE_BYTES or _binary(path):
                continue
            named = not _GLOB.search(doc) and listed is None
            where = listed.absolute() if listed is not None else None
            if ignored is not None and not named and ignored(path.absolute(), where):
                continue
            key = str(path)
            found.setdefault(key, FileState(key, stat.st_size, stat.st_mtime_ns))
    return list(found.values())


def _binary(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return b"\0" in f.read(8192)
    except OSError:
        return True


def read_text(path: str) -> tuple[str, str]:
    """The text of ``path`` and its SHA-256."""
    raw = Path(path).read_bytes()
    return raw.decode("utf-8", errors="replace"), hashlib.sha256(raw).hexdigest()


# --- vectors -------------------------------------------------------------------------------------


def pack(vector: Iterable[float]) -> bytes:
    """``vector`` scaled to length 1, as float32 bytes (so cosine is a dot product)."""
    values = [float(v) for v in vector]
    norm = math.sqrt(math.fsum(v * v for v in values)) or 1.0
    return array("f", [v / norm for v in values]).tobytes()


def unpack(blob: bytes) -> array[float]:
    out = array("f")
    out.frombytes(blob)
    return out


def cosine(query: array[float], vector: array[float]) -> float:
    """Cosine similarity of two vectors of length 1."""
    return math.fsum(a * b for a, b in zip(query, vector, strict=False))


_vec_unavailable = False
"""Set when sqlite-vec could not be loaded once (logged then): not tried again."""


def load_vec(db: sqlite3.Connection) -> bool:
    """Load sqlite-vec into ``db`` (imported on first use); False when it cannot be (no
    wheel for the platform, or a Python whose ``sqlite3`` cannot load extensions), logged
    once. Extension loading is switched off again at once, so SQL cannot load others."""
    global _vec_unavailable
    if _vec_unavailable:
        return False
    try:
        import sqlite_vec  # type: ignore[import-untyped]  # no stubs or py.typed

        db.enable_load_extension(True)
        try:
            sqlite_vec.load(db)
        finally:
            db.enable_load_extension(False)
    except (ImportError, AttributeError, OSError, sqlite3.Error) as exc:
        _vec_unavailable = True
        log.warning("sqlite-vec unavailable (%s): RAG vectors are searched in Python", exc)
        return False
    return True


def vec_slack(dimensions: int) -> float:
    """A bound on how far sqlite-vec's float32 cosine distance may be from the exact one
    (twice n times float32's unit roundoff, times four for the norms and the division)."""
    return 8.0 * max(dimensions, 1) * 2.0**-24


_NEAREST = """
SELECT d FROM (SELECT vec_distance_cosine(vector, ?) AS d FROM chunks WHERE vector IS NOT NULL)
WHERE d IS NOT NULL ORDER BY d LIMIT 1 OFFSET ?
"""
_WITHIN = """
SELECT path, idx, content, vector FROM chunks
WHERE vector IS NOT NULL AND vec_distance_cosine(vector, ?) <= ? ORDER BY path, idx
"""


# --- the store -----------------------------------------------------------------------------------


class IndexStore:
    """One strategy's chunks in an SQLite file; see the module docstring."""

    def __init__(self, path: Path, meta: str) -> None:
        self.path = path
        self.meta = meta

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=30.0)) as db, db:
            yield db

    def open(self) -> None:
        """Create the file and tables; empty the index when it was built differently."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.executescript(_SCHEMA)
            row = db.execute("SELECT value FROM meta WHERE key = 'build'").fetchone()
            if row is None or row[0] != self.meta:
                db.execute("DELETE FROM chunks")
                db.execute("DELETE FROM files")
                db.execute("INSERT OR REPLACE INTO meta VALUES ('build', ?)", (self.meta,))

    def changed(self, files: list[FileState]) -> tuple[list[FileState], list[str]]:
        """The files whose size or mtime differ from the index, and the indexed paths gone."""
        with self._db() as db:
            known = {
                r[0]: (r[1], r[2]) for r in db.execute("SELECT path, size, mtime_ns FROM files")
            }
        present = {f.path for f in files}
        stale = [f for f in files if known.get(f.path) != (f.size, f.mtime_ns)]
        return stale, [p for p in known if p not in present]

    def same_hash(self, path: str, sha: str, state: FileState) -> bool:
        """True when ``path`` is indexed with content ``sha`` (its stat is then refreshed)."""
        with self._db() as db:
            row = db.execute("SELECT sha256 FROM files WHERE path = ?", (path,)).fetchone()
            if row is None or row[0] != sha:
                return False
            db.execute(
                "UPDATE files SET size = ?, mtime_ns = ? WHERE path = ?",
                (state.size, state.mtime_ns, path),
            )
        return True

    def replace(
        self, state: FileState, sha: str, chunks: list[str], vectors: list[bytes | None]
    ) -> None:
        with self._db() as db:
            db.execute("DELETE FROM chunks WHERE path = ?", (state.path,))
            db.executemany(
                "INSERT INTO chunks VALUES (?, ?, ?, ?)",
                [
                    (state.path, i, c, v)
                    for i, (c, v) in enumerate(zip(chunks, vectors, strict=True))
                ],
            )
            db.execute(
                "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?)",
                (state.path, sha, state.size, state.mtime_ns),
            )

    def remove(self, paths: list[str]) -> None:
        with self._db() as db:
            for path in paths:
                db.execute("DELETE FROM chunks WHERE path = ?", (path,))
                db.execute("DELETE FROM files WHERE path = ?", (path,))

    def chunks(self) -> list[tuple[str, int, str, bytes | None]]:
        with self._db() as db:
            return list(
                db.execute("SELECT path, idx, content, vector FROM chunks ORDER BY path, idx")
            )

    def nearest(self, query: bytes, k: int) -> list[tuple[str, int, str, bytes | None]] | None:
        """The chunks that may be among the ``k`` nearest to ``query`` (packed by :func:`pack`
        vector), found by sqlite-vec: those within :func:`vec_slack` of the k-th smallest
        distance, in the order of :meth:`chunks`. The caller scores them exactly, so the hits
        are those of an exact scan of :meth:`chunks`. None: sqlite-vec is unavailable or
        refused the vectors (the caller then scans every chunk)."""
        with self._db() as db:
            if k < 1 or not load_vec(db):
                return None
            try:
                kth = db.execute(_NEAREST, (query, k - 1)).fetchone()
                if kth is None:  # fewer than k chunks with a distance: all of them
                    return list(
                        db.execute(
                            "SELECT path, idx, content, vector FROM chunks ORDER BY path, idx"
                        )
                    )
                cutoff = float(kth[0]) + vec_slack(len(query) // 4)
                return list(db.execute(_WITHIN, (query, cutoff)))
            except sqlite3.OperationalError as exc:  # e.g. vectors of another length
                log.warning("sqlite-vec search failed (%s): searching in Python", exc)
                return None

    def count(self) -> int:
        with self._db() as db:
            return int(db.execute("SELECT count(*) FROM chunks").fetchone()[0])


# --- BM25 ----------------------------------------------------------------------------------------

_WORD = re.compile(r"\w+")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "for",
        "in",
        "is",
        "of",
        "on",
        "or",
        "the",
        "to",
        "was",
        "were",
    ]
)


def tokens(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def bm25_scores(query: str, docs: list[list[str]], k1: float, b: float) -> list[float]:
    """Okapi BM25 of each tokenized document for ``query``; idf is ln(1 + (N-n+0.5)/(n+0.5))
    (never negative), document length is its token count."""
    terms = list(dict.fromkeys(tokens(query)))
    count = len(docs)
    if not terms or not count:
        return [0.0] * count
    average = sum(len(d) for d in docs) / count or 1.0
    frequencies = [_counts(d) for d in docs]
    idf = {}
    for term in terms:
        n = sum(1 for f in frequencies if term in f)
        idf[term] = math.log(1 + (count - n + 0.5) / (n + 0.5))
    scores = []
    for doc, freq in zip(docs, frequencies, strict=True):
        norm = k1 * (1 - b + b * len(doc) / average)
        score = 0.0
        for term in terms:
            tf = freq.get(term, 0)
            if tf:
                score += idf[term] * tf * (k1 + 1) / (tf + norm)
        scores.append(score)
    return scores


def _counts(words: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for word in words:
        out[word] = out.get(word, 0) + 1
    return out
