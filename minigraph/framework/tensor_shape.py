"""Static shapes with unknown dimensions, as shape inference sees them.

A :class:`TensorShape` is either of unknown rank (``dims is None``) or a tuple whose entries
are ints or ``None`` (an unknown dimension). It compares equal to plain tuples and lists, so
``output.shape == (8, 5, 5, 3)`` reads naturally. ``merge_with`` is TensorFlow's shape
``Merge``: the most specific shape compatible with both, or an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator


class ShapeMismatch(ValueError):
    """Two shapes or dimensions are incompatible; callers turn it into an op error."""


def merge_dim(a: int | None, b: int | None) -> int | None:
    """Merge two dimensions: equal known values, or the known one of a known/unknown pair."""
    if a is None:
        return b
    if b is None or a == b:
        return a
    raise ShapeMismatch(f"Dimensions must be equal, but are {a} and {b}")


class TensorShape:
    """A possibly partially known shape; immutable."""

    __slots__ = ("_dims",)

    def __init__(self, dims: Iterable[int | None] | None) -> None:
        if dims is None:
            self._dims = None
        else:
            checked = []
            for d in dims:
                if d is not None and (int(d) != d or int(d) < 0):
                    raise ValueError(f"dimension must be a non-negative int or None, got {d!r}")
                checked.append(None if d is None else int(d))
            self._dims = tuple(checked)

    @classmethod
    def unknown(cls, rank: int | None = None) -> TensorShape:
        return cls(None if rank is None else [None] * rank)

    @property
    def dims(self) -> tuple[int | None, ...] | None:
        return self._dims

    @property
    def rank(self) -> int | None:
        return None if self._dims is None else len(self._dims)

    def is_fully_defined(self) -> bool:
        return self._dims is not None and all(d is not None for d in self._dims)

    def num_elements(self) -> int | None:
        if not self.is_fully_defined():
            return None
        count = 1
        for d in self._dims:
            count *= d
        return count

    def with_rank(self, rank: int) -> TensorShape:
        """This shape, checked to have ``rank`` (unknown rank becomes ``rank`` unknown dims)."""
        if self._dims is None:
            return TensorShape.unknown(rank)
        if len(self._dims) != rank:
            raise ShapeMismatch(f"Shape must be rank {rank} but is rank {len(self._dims)}")
        return self

    def merge_with(self, other: TensorShape | Iterable[int | None] | None) -> TensorShape:
        other = as_shape(other)
        if self._dims is None:
            return other
        if other._dims is None:
            return self
        if len(self._dims) != len(other._dims):
            raise ShapeMismatch(
                f"Shapes must be equal rank, but are {len(self._dims)} and {len(other._dims)}")
        return TensorShape(merge_dim(a, b) for a, b in zip(self._dims, other._dims))

    def is_compatible_with(self, concrete: tuple[int, ...]) -> bool:
        """True if a concrete runtime shape fits this static shape."""
        if self._dims is None:
            return True
        return len(self._dims) == len(concrete) and all(
            d is None or d == c for d, c in zip(self._dims, concrete))

    def replace_dim(self, axis: int, value: int | None) -> TensorShape:
        dims = list(self._dims)
        dims[axis] = value
        return TensorShape(dims)

    def as_list(self) -> list[int | None]:
        if self._dims is None:
            raise ValueError("as_list() is not defined on an unknown-rank TensorShape")
        return list(self._dims)

    def __iter__(self) -> Iterator[int | None]:
        if self._dims is None:
            raise ValueError("cannot iterate over a shape of unknown rank")
        return iter(self._dims)

    def __len__(self) -> int:
        if self._dims is None:
            raise ValueError("len() of a shape of unknown rank")
        return len(self._dims)

    def __getitem__(self, index):
        if self._dims is None:
            return None
        return self._dims[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TensorShape):
            return self._dims == other._dims
        if isinstance(other, (tuple, list)):
            return self._dims is not None and self._dims == tuple(other)
        if other is None:
            return self._dims is None
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._dims)

    def __str__(self) -> str:
        if self._dims is None:
            return "<unknown>"
        if len(self._dims) == 1:
            return f"({self._dims[0]},)"
        return f"({_joined([str(d) for d in self._dims], ', ')})"

    def __repr__(self) -> str:
        return "TensorShape(None)" if self._dims is None else f"TensorShape({list(self._dims)})"


SHOWN_DIMS = 16  # a message shows at most this many dimensions of a shape


def _joined(texts: list[str], separator: str) -> str:
    """The dims' texts joined; more than SHOWN_DIMS of them (a file may claim rank 250) show
    the first and last few and the rank, so no message grows with the rank."""
    if len(texts) <= SHOWN_DIMS:
        return separator.join(texts)
    return (separator.join(texts[:SHOWN_DIMS - 4]) + f"{separator}...{separator}"
            + separator.join(texts[-2:]) + f" (rank {len(texts)})")


def as_shape(value: TensorShape | Iterable[int | None] | None) -> TensorShape:
    return value if isinstance(value, TensorShape) else TensorShape(value)


def dims_text(dims: Iterable[int | None] | TensorShape | None) -> str:
    """TF's way of printing a shape in messages: ``[2,?,3]`` (``?`` an unknown dim, ``[*]``
    an unknown rank, ``[]`` a scalar); accepts a TensorShape or any sequence of dims."""
    if isinstance(dims, TensorShape):
        dims = dims.dims
    if dims is None:
        return "[*]"
    return "[" + _joined(["?" if d is None else str(d) for d in dims], ",") + "]"
