"""The shape of one conversation: a tree of messages, one branch of which is on screen.

Every message row has a ``parent_id`` (None for the first turn). Children of the same parent
are *variants* of one turn (an edited question, a regenerated answer), ordered by insertion
(``seq``); the one with the highest ``active_rank`` is the parent's *active child*. The chat on
screen (the *active path*) starts at the active root and follows active children down to a
leaf. Making a variant active gives it a fresh, conversation-wide highest rank, so there is
always exactly one active child per parent and no second row to keep in step.

Soft-deleted messages stay in the table (so a delete can be undone) but not in the tree:
a live message whose parent is deleted hangs from its nearest live ancestor. This module is
pure: ``History`` loads the ``Node`` rows and asks it questions.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Node:
    id: int
    parent_id: int | None
    seq: int
    rank: int
    deleted: bool = False


class Tree:
    """The live messages of one conversation, as parent → children."""

    def __init__(self, nodes: list[Node]) -> None:
        self._all = {n.id: n for n in nodes}
        self.parent: dict[int, int | None] = {}
        self.children: dict[int | None, list[int]] = {}
        self._depth: dict[int, int] = {}  # known as each node arrives after its parent
        for node in sorted(nodes, key=lambda n: n.seq):
            if node.deleted:
                continue
            parent = self._live_ancestor(node)
            self.parent[node.id] = parent
            self.children.setdefault(parent, []).append(node.id)
            if parent is None:
                self._depth[node.id] = 0
            elif parent in self._depth:
                self._depth[node.id] = self._depth[parent] + 1

    def __contains__(self, message_id: int) -> bool:
        return message_id in self.parent

    def _live_ancestor(self, node: Node) -> int | None:
        seen = {node.id}
        current = node.parent_id
        while current is not None:
            up = self._all.get(current)
            if up is None or current in seen:  # dangling or cyclic link: treat as a root
                return None
            if not up.deleted:
                return current
            seen.add(current)
            current = up.parent_id
        return None

    def active_child(self, parent: int | None) -> int | None:
        kids = self.children.get(parent)
        if not kids:
            return None
        return max(kids, key=lambda i: (self._all[i].rank, self._all[i].seq))

    def path(self) -> list[int]:
        """The active path: root to leaf through active children."""
        result: list[int] = []
        node = self.active_child(None)
        while node is not None:
            result.append(node)
            node = self.active_child(node)
        return result

    def leaf(self) -> int | None:
        path = self.path()
        return path[-1] if path else None

    def lineage(self, message_id: int) -> list[int]:
        """``message_id`` and its live ancestors, root first."""
        chain = [message_id]
        while (up := self.parent.get(chain[-1])) is not None:
            chain.append(up)
        return chain[::-1]

    def siblings(self, message_id: int) -> list[int]:
        """The variants of ``message_id``'s turn, itself included, oldest first."""
        return self.children.get(self.parent.get(message_id), [])

    def subtree(self, message_id: int) -> list[int]:
        """``message_id`` and every live message below it."""
        result, stack = [], [message_id]
        while stack:
            node = stack.pop()
            result.append(node)
            stack.extend(self.children.get(node, []))
        return result

    def is_active(self, message_id: int) -> bool:
        return self.active_child(self.parent.get(message_id)) == message_id

    def variant_fields(self, message_id: int, depth: int) -> dict:
        """The ``StoredMessage`` fields the tree decides."""
        siblings = self.siblings(message_id)
        return {
            "position": depth,
            "parent_id": self.parent.get(message_id),
            "variant_index": siblings.index(message_id),
            "variant_count": len(siblings),
            "variant_ids": tuple(siblings),
            "active": self.is_active(message_id),
        }

    def depth(self, message_id: int) -> int:
        """How many live ancestors ``message_id`` has (known in O(1) for the usual order, in
        which a parent was inserted before its children: reading a 50,000-message chat whole
        must not walk its length once per message)."""
        known = self._depth.get(message_id)
        if known is not None:
            return known
        return len(self.lineage(message_id)) - 1
