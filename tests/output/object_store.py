"""An in-memory object store behind pyarrow's filesystem interface, with an object
store's semantics: flat keys, no directories to create and no rename (``move`` fails),
an object visible only once its stream is closed. It records the order objects were
committed in and can fail the N-th upload, or run a hook when an object lands."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs


class _Upload(io.BytesIO):
    def __init__(self, store: MemoryStore, key: str) -> None:
        super().__init__()
        self._store, self._key = store, key

    def close(self) -> None:
        if not self.closed:
            self._store.commit(self._key, self.getvalue())
        super().close()


class MemoryStore(pafs.FileSystemHandler):
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.committed: list[str] = []  # keys, in the order their uploads completed
        self.fail_upload: int | None = None  # the N-th upload (from 1) raises
        self.on_commit: Callable[[str], None] | None = None
        self.refuse_deletes = False
        self._uploads = 0

    def commit(self, key: str, data: bytes) -> None:
        self.objects[key] = data
        self.committed.append(key)
        if self.on_commit is not None:
            self.on_commit(key)

    # -- pyarrow's interface ----------------------------------------------------------

    def get_type_name(self) -> str:
        return "memory-object-store"

    def normalize_path(self, path: str) -> str:
        return path

    def _info(self, path: str) -> pafs.FileInfo:
        if path in self.objects:
            return pafs.FileInfo(path, pafs.FileType.File, size=len(self.objects[path]))
        if any(key.startswith(path.rstrip("/") + "/") for key in self.objects):
            return pafs.FileInfo(path, pafs.FileType.Directory)
        return pafs.FileInfo(path, pafs.FileType.NotFound)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return [self._info(p) for p in paths]

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        base = selector.base_dir.rstrip("/") + "/"
        keys = [k for k in sorted(self.objects) if k.startswith(base)]
        if not keys and not selector.allow_not_found:
            raise FileNotFoundError(selector.base_dir)
        if not selector.recursive:
            keys = [k for k in keys if "/" not in k[len(base) :]]
        return [self._info(k) for k in keys]

    def create_dir(self, path: str, recursive: bool) -> None:
        raise AssertionError(f"an object store has no directories to create ({path})")

    def delete_dir(self, path: str) -> None:
        raise AssertionError(f"rowgate never deletes a prefix ({path})")

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        raise AssertionError(f"rowgate never deletes a prefix ({path})")

    def delete_root_dir_contents(self) -> None:
        raise AssertionError("rowgate never empties a store")

    def delete_file(self, path: str) -> None:
        if self.refuse_deletes:
            raise PermissionError(f"injected: access denied deleting {path}")
        if path not in self.objects:
            raise FileNotFoundError(path)
        del self.objects[path]

    def move(self, src: str, dest: str) -> None:
        raise OSError(f"an object store cannot rename ({src} → {dest})")

    def copy_file(self, src: str, dest: str) -> None:
        self.commit(dest, self.objects[src])

    def open_input_stream(self, path: str) -> pa.NativeFile:
        if path not in self.objects:
            raise FileNotFoundError(path)
        return pa.BufferReader(self.objects[path])

    def open_input_file(self, path: str) -> pa.NativeFile:
        return self.open_input_stream(path)

    def open_output_stream(self, path: str, metadata: Any) -> pa.NativeFile:
        self._uploads += 1
        if self._uploads == self.fail_upload:
            raise OSError(f"injected: the store refused upload {self._uploads} ({path})")
        return pa.PythonFile(_Upload(self, path), mode="w")

    def open_append_stream(self, path: str, metadata: Any) -> pa.NativeFile:
        raise AssertionError("objects are written whole")
