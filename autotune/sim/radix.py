"""The simulated engine's prefix cache: a radix tree over token ids with page granularity, a
device tier (the KV pool) and a host tier (HiCache), and mamba-state checkpoints for hybrid models.

Residency is prefix-closed on each tier (a node resident on a tier has its parent resident there
too): eviction takes least-recently-used leaves first, as SGLang's RadixCache does. With HiCache a
device eviction keeps the node's host copy (written at insert under write_through, at eviction
under write_back); a later match of it is a host hit that must be restored before prefill.

Hybrid models (FIELD-NOTES P12): the recurrent state exists only where it was checkpointed into
the tree (prefill chunk boundaries, decode tracking points, request end), so a match is usable only
up to the last checkpoint at or before the matched length. Checkpoints sit at node ends and take a
mamba slot on the tier that holds them.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from autotune.sim.tokens import IdArray


class Node:
    __slots__ = (
        "key",
        "children",
        "parent",
        "end",
        "device",
        "host",
        "lock",
        "last",
        "ck_dev",
        "ck_host",
        "inner",
    )

    def __init__(self, key: IdArray, parent: Node | None, end: int, last: int):
        self.key = key
        self.children: dict[bytes, Node] = {}
        self.parent = parent
        self.end = end  # absolute token position of this node's last token + 1
        self.device = False
        self.host = False
        self.lock = 0
        self.last = last
        self.ck_dev = False
        self.ck_host = False
        self.inner = False  # a deeper checkpoint exists below: evicted before end-of-path ones

    def __lt__(self, other: Node) -> bool:  # heap tie-break
        return id(self) < id(other)


@dataclass
class Match:
    """A prefix match: `usable` tokens can be skipped, `host` of them must be restored first."""

    usable: int = 0
    device: int = 0  # usable tokens whose KV is on the device
    host: int = 0  # usable tokens whose KV is only in the host pool
    restore: bool = False  # a host restore is needed (KV or the mamba checkpoint)
    matched: int = 0  # raw matched length before the checkpoint rule
    path: list[Node] = field(default_factory=list)  # nodes covering [0, usable)


class RadixCache:
    """Token-level prefix cache. Capacities are in tokens (KV) and slots (mamba checkpoints)."""

    def __init__(
        self,
        *,
        enabled: bool = True,
        page: int = 1,
        host_tokens: int = 0,
        hybrid: bool = False,
        mamba_host_slots: int = 0,
        write_back: bool = False,
        mamba_device_slots: Callable[[], int] = lambda: 0,
    ):
        self.enabled = enabled
        self.page = max(page, 1)
        self.host_capacity = host_tokens
        self.hybrid = hybrid
        self.mamba_host_capacity = mamba_host_slots if host_tokens else 0
        self.write_back = write_back
        self.mamba_device_capacity = mamba_device_slots
        self.tick = 0
        self.reset()

    def reset(self) -> None:
        self.root = Node(np.zeros(0, dtype=np.int64), None, 0, 0)
        self.root.device = self.root.host = True
        self.device_tokens = 0
        self.locked_device_tokens = 0
        self.host_tokens = 0
        self.ck_dev_nodes: set[Node] = set()
        self.ck_host_nodes: set[Node] = set()
        self.evicted_tokens = 0
        self.backup_tokens = 0

    # -- helpers ------------------------------------------------------------------------------

    def _touch(self, nd: Node) -> None:
        # A counter, not a clock: nodes touched in path order get increasing stamps, so of the
        # checkpoints one request leaves, the deepest (its end state) is evicted last.
        self.tick += 1
        nd.last = self.tick

    def _ckey(self, seq: IdArray, pos: int) -> bytes:
        return seq[pos : pos + self.page].tobytes()

    def _split(self, node: Node, at: int) -> Node:
        """Split `node` so that its first `at` tokens become a new parent; return the parent."""
        assert 0 < at < len(node.key)
        parent = node.parent
        assert parent is not None
        top = Node(node.key[:at], parent, node.end - len(node.key) + at, node.last)
        top.device, top.host, top.lock = node.device, node.host, node.lock
        parent.children[self._ckey(node.key, 0)] = top
        node.key = node.key[at:]
        node.parent = top
        top.children[self._ckey(node.key, 0)] = node
        return top

    def _common(self, a: IdArray, b: IdArray) -> int:
        n = min(len(a), len(b))
        if n == 0:
            return 0
        diff = np.flatnonzero(a[:n] != b[:n])
        c = int(diff[0]) if diff.size else n
        return c // self.page * self.page

    def _walk(self, seq: IdArray, limit: int) -> tuple[list[Node], int]:
        """Nodes fully matching seq[:limit] from the root (splitting a partial one)."""
        node, pos, path = self.root, 0, []
        while pos + self.page <= limit:
            child = node.children.get(self._ckey(seq, pos))
            if child is None:
                break
            c = self._common(child.key, seq[pos:limit])
            if c <= 0:
                break
            if c < len(child.key):
                child = self._split(child, c)
            path.append(child)
            pos += c
            node = child
            if c < len(node.key):
                break
        return path, pos

    # -- queries -----------------------------------------------------------------------------

    def match(self, seq: IdArray) -> Match:
        """Longest usable cached prefix of seq; at least one token is always left to compute."""
        if not self.enabled or len(seq) < 2:
            return Match()
        limit = (len(seq) - 1) // self.page * self.page
        path, matched = self._walk(seq, limit)
        # keep only the resident prefix (device or host)
        resident = []
        for n in path:
            if not (n.device or n.host):
                break
            resident.append(n)
        if self.hybrid:
            while resident and not (resident[-1].ck_dev or resident[-1].ck_host):
                resident.pop()
        usable = resident[-1].end if resident else 0
        dev = 0
        for n in resident:
            if not n.device:
                break
            dev = n.end
        restore = dev < usable or bool(self.hybrid and resident and not resident[-1].ck_dev)
        for n in resident:
            self._touch(n)
        return Match(
            usable=usable,
            device=dev,
            host=usable - dev,
            restore=restore,
            matched=matched,
            path=resident,
        )

    def evictable(self) -> int:
        return self.device_tokens - self.locked_device_tokens

    # -- locks ---------------------------------------------------------------------------------

    def lock(self, node: Node | None) -> None:
        while node is not None and node is not self.root:
            if node.lock == 0 and node.device:
                self.locked_device_tokens += len(node.key)
            node.lock += 1
            node = node.parent

    def unlock(self, node: Node | None) -> None:
        while node is not None and node is not self.root:
            node.lock -= 1
            if node.lock == 0 and node.device:
                self.locked_device_tokens -= len(node.key)
            node = node.parent

    # -- insert ---------------------------------------------------------------------------------

    def insert(self, seq: IdArray, checkpoints: Iterable[int]) -> tuple[int, Node]:
        """Make seq (floored to a page) device-resident in the tree, with mamba checkpoints at
        the given positions; returns (device tokens added, last node)."""
        if not self.enabled:
            return 0, self.root
        n = len(seq) // self.page * self.page
        seq = seq[:n]
        path, pos = self._walk(seq, n)
        node = path[-1] if path else self.root
        if pos < n:
            child = Node(seq[pos:n].copy(), node, n, 0)
            node.children[self._ckey(seq, pos)] = child
            path.append(child)
            node = child
        # split at checkpoint positions so each one is a node end
        cks = sorted({c // self.page * self.page for c in checkpoints if 0 < c <= n})
        if self.hybrid and cks:
            path = self._split_at(path, cks)
        added = 0
        host_ok = self.host_capacity > 0 and not self.write_back
        for nd in path:
            self._touch(nd)
            if not nd.device:
                nd.device = True
                self.device_tokens += len(nd.key)
                added += len(nd.key)
                if nd.lock:
                    self.locked_device_tokens += len(nd.key)
            if host_ok and not nd.host:
                host_ok = self._backup(nd)
        if self.hybrid:
            ckset = set(cks)
            for nd in path:
                if nd.end in ckset:
                    self._checkpoint(nd)
            held = [nd for nd in path if nd.ck_dev or nd.ck_host]
            for nd in held[:-1]:
                nd.inner = True
        return added, node

    def _split_at(self, path: list[Node], cks: list[int]) -> list[Node]:
        out: list[Node] = []
        for nd in path:
            start = nd.end - len(nd.key)
            inner = [c - start for c in cks if start < c < nd.end]
            pieces = []
            for off in reversed(inner):  # split from the back so offsets stay valid
                top = self._split(nd, off)
                pieces.append(nd)
                nd = top
            pieces.append(nd)
            out.extend(reversed(pieces))
        return out

    def _backup(self, nd: Node) -> bool:
        """Copy a node's KV to the host tier; False when the host pool cannot take it."""
        size = len(nd.key)
        free = self.host_capacity - self.host_tokens
        if free < size:
            self._evict_host(size - free, protect=nd)
            free = self.host_capacity - self.host_tokens
            if free < size:
                return False
        nd.host = True
        self.host_tokens += size
        self.backup_tokens += size
        return True

    @property
    def ck_dev_count(self) -> int:
        return len(self.ck_dev_nodes)

    @property
    def ck_host_count(self) -> int:
        return len(self.ck_host_nodes)

    def _set_ck(self, nd: Node, host: bool, on: bool) -> None:
        nodes = self.ck_host_nodes if host else self.ck_dev_nodes
        if host:
            nd.ck_host = on
        else:
            nd.ck_dev = on
        if on:
            nodes.add(nd)
        else:
            nodes.discard(nd)

    def _checkpoint(self, nd: Node) -> None:
        if not nd.ck_dev and nd.device:
            cap = self.mamba_device_capacity()
            if self.ck_dev_count >= cap:
                self._evict_ck(False, self.ck_dev_count - cap + 1, protect=nd)
            if self.ck_dev_count < cap:
                self._set_ck(nd, False, True)
        if not self.write_back and nd.host and not nd.ck_host:
            self._host_checkpoint(nd)

    def _host_checkpoint(self, nd: Node) -> None:
        if self.ck_host_count >= self.mamba_host_capacity:
            self._evict_ck(True, 1, protect=nd)
        if self.ck_host_count < self.mamba_host_capacity:
            self._set_ck(nd, True, True)

    # -- eviction -------------------------------------------------------------------------------

    def _nodes(self) -> Iterable[Node]:
        stack = list(self.root.children.values())
        while stack:
            nd = stack.pop()
            yield nd
            stack.extend(nd.children.values())

    def evict_device(self, tokens: int) -> int:
        """Free at least `tokens` device tokens from unlocked LRU leaves; returns tokens freed."""
        if tokens <= 0:
            return 0

        def leaf(nd: Node) -> bool:
            return nd.device and nd.lock == 0 and not any(c.device for c in nd.children.values())

        freed = self._evict_lru(leaf, tokens, self._drop_device)
        self.evicted_tokens += freed
        return freed

    def _evict_lru(
        self, leaf: Callable[[Node], bool], tokens: int, drop: Callable[[Node], None]
    ) -> int:
        """Drop least-recently-used nodes that `leaf` accepts until `tokens` are freed; a parent
        that becomes such a leaf joins the candidates. Returns the tokens freed."""
        heap = [(nd.last, nd) for nd in self._nodes() if leaf(nd)]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < tokens:
            _, nd = heapq.heappop(heap)
            if not leaf(nd):
                continue
            parent = nd.parent
            freed += len(nd.key)
            drop(nd)
            if parent is not None and parent is not self.root and leaf(parent):
                heapq.heappush(heap, (parent.last, parent))
        return freed

    def _drop_device(self, nd: Node) -> None:
        nd.device = False
        self.device_tokens -= len(nd.key)
        if self.write_back and self.host_capacity and not nd.host:
            self._backup(nd)
        if nd.ck_dev:
            self._set_ck(nd, False, False)
            if nd.host and not nd.ck_host:
                self._host_checkpoint(nd)
        if not nd.host:
            self._delete(nd)

    def _delete(self, nd: Node) -> None:
        """Remove a node no tier holds, with any (unreachable) host-only subtree below it."""
        for child in list(nd.children.values()):
            if child.host:
                child.host = False
                self.host_tokens -= len(child.key)
            self._delete(child)
        if nd.ck_host:
            self._set_ck(nd, True, False)
        if nd.ck_dev:
            self._set_ck(nd, False, False)
        if nd.parent is not None:
            nd.parent.children.pop(self._ckey(nd.key, 0), None)
        nd.parent = None

    def _evict_host(self, tokens: int, protect: Node | None = None) -> int:
        def leaf(nd: Node) -> bool:
            return (
                nd.host
                and not nd.device
                and nd.lock == 0
                and nd is not protect
                and not any(c.host for c in nd.children.values())
            )

        return self._evict_lru(leaf, tokens, self._drop_host)

    def _drop_host(self, nd: Node) -> None:
        nd.host = False
        self.host_tokens -= len(nd.key)
        self._delete(nd)

    def _evict_ck(self, host: bool, count: int, protect: Node | None = None) -> None:
        """Drop `count` checkpoints of a tier: inner ones (a deeper checkpoint covers their
        path) before the ends of paths, least recently used first."""
        nodes = self.ck_host_nodes if host else self.ck_dev_nodes
        cands = [nd for nd in nodes if nd.lock == 0 and nd is not protect]
        for nd in heapq.nsmallest(count, cands, key=lambda n: (not n.inner, n.last)):
            self._set_ck(nd, host, False)
            if not host and self.write_back and nd.host and not nd.ck_host:
                self._host_checkpoint(nd)  # write_back: the state goes to host on eviction

    def trim_checkpoints(self) -> None:
        """Drop LRU device checkpoints above the current slot capacity (running requests took
        slots)."""
        over = self.ck_dev_count - self.mamba_device_capacity()
        if over > 0:
            self._evict_ck(False, over)
