"""Dual-feasible functions: what packing rectangles into the wafer proves beyond their area (issue 37).

A kernel's rectangle is h x w cores on a wafer of H x W. Area alone says the rectangles' cores add up to
at most H x W; it does not see that three rectangles of 0.4 H cannot share a column of the wafer. A
*dual-feasible function* (DFF) f of one side, here on the integers 0..C, is one with

    x_1 + ... + x_n <= C  implies  f(x_1) + ... + f(x_n) <= f(C)

(Fekete & Schepers, "A general framework for bounds for higher-dimensional orthogonal packing
problems", 2004; Carlier, Clautiaux & Moukrim, "New reduction procedures and lower bounds for the
two-dimensional bin packing problem", 2007). Fekete and Schepers prove that if rectangles (h_i, w_i)
pack disjointly in H x W, then for every pair of DFFs f (of the rows) and g (of the columns)

    sum_i f(h_i) g(w_i) <= f(H) g(W),

the transformed rectangles' area. With shapes to choose from, a kernel adds at least its least
f(h) g(w) over the shapes it may take, so a target whose least terms add up to more than f(H) g(W)
has no layout. Every function here is nondecreasing (so that least is on the shapes' Pareto front)
and takes integers (no rounding to give away); ``tests/test_comm_bound.py`` checks the DFF property of
each of them on every multiset of small sides.

The family (fixed per problem, never per target, so the test stays monotone in the target):

* the identity: the area argument itself;
* ``u^(k)`` for k = 1..``MAX_K`` (Fekete & Schepers): x when (k + 1) x is a multiple of C, else
  floor((k + 1) x / C) C, of f(C) = k C. It rounds sides down to multiples of C / k and charges the
  sides that leave a gap: k = 1 is the strip argument (sides over half the wafer side by side), k = 3
  counts ViT-B/16's 197-row kernels on wse3's 768 rows as 256;
* ``f_0^l`` (the u^(eps) function): C for x > C - l, x for l <= x <= C - l, 0 for x < l; l at every
  side of the problem (x > C / 2 promoted at l = C - x + 1, smaller sides dropped at l = x);
* ``CCM^l`` (Carlier, Clautiaux & Moukrim's f_2): 2 (floor(C / l) - floor((C - x) / l)) for x > C / 2,
  floor(C / l) at x = C / 2, 2 floor(x / l) below, at l = the problem's sides up to C / 2.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

MAX_K = 12  # u^(k) up to k: a side is rounded to twelfths of the wafer at finest


def identity(side: int) -> np.ndarray:
    """f(x) = x on 0..side."""
    return np.arange(side + 1, dtype=np.int64)


def u_k(side: int, k: int) -> np.ndarray:
    """Fekete and Schepers' u^(k) on 0..side, scaled by k x side to stay integral (f(side) = k side)."""
    x = np.arange(side + 1, dtype=np.int64)
    exact = ((k + 1) * x) % side == 0
    return np.where(exact, k * x, ((k + 1) * x // side) * side)


def f0(side: int, lam: int) -> np.ndarray:
    """The u^(eps) function at l = ``lam`` (1 <= l <= side / 2): sides over side - l count whole,
    sides under l nothing."""
    x = np.arange(side + 1, dtype=np.int64)
    return np.where(x > side - lam, side, np.where(x < lam, 0, x))


def ccm(side: int, lam: int) -> np.ndarray:
    """Carlier, Clautiaux and Moukrim's f_2 at l = ``lam`` (1 <= l <= side / 2)."""
    x = np.arange(side + 1, dtype=np.int64)
    big = 2 * (side // lam - (side - x) // lam)
    small = 2 * (x // lam)
    return np.where(2 * x > side, big, np.where(2 * x == side, side // lam, small))


def side_functions(side: int, sizes: Iterable[int]) -> np.ndarray:
    """The family of the module docstring on 0..``side`` for a problem whose rectangles have the sides
    ``sizes``: an int64 array (functions x (side + 1)), the identity first, then u^(1..MAX_K)."""
    rows = [identity(side)]
    rows += [u_k(side, k) for k in range(1, MAX_K + 1)]
    lams: set[int] = set()
    small: set[int] = set()
    for s in sorted({int(v) for v in sizes}):
        if 1 <= s <= side:
            lam = s if 2 * s <= side else side - s + 1
            if 1 <= lam <= side // 2:
                lams.add(lam)
            if 2 * s <= side:
                small.add(s)
    rows += [f0(side, lam) for lam in sorted(lams)]
    rows += [ccm(side, lam) for lam in sorted(small)]
    return np.stack(rows)


def pairs(n_rows: int, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Which (row function, column function) pairs to test: every function of one side with the
    identity of the other, and the ``u^(k)`` of both sides together (indices 1..MAX_K in
    ``side_functions``' order; the mixed pairs of the other functions cost more than they found)."""
    a = [0] * n_cols + list(range(1, n_rows))
    b = list(range(n_cols)) + [0] * (n_rows - 1)
    top_r, top_c = min(n_rows, MAX_K + 1), min(n_cols, MAX_K + 1)
    for i in range(1, top_r):
        for j in range(1, top_c):
            a.append(i)
            b.append(j)
    return np.array(a, dtype=np.int64), np.array(b, dtype=np.int64)


def pareto_front(r: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shapes no other shape is at most as tall and as wide as (rows ascending, columns
    descending): a nondecreasing f(h) g(w) is least on one of them."""
    order = np.lexsort((c, r))
    rs, cs = r[order], c[order]
    first = np.concatenate(([True], rs[1:] != rs[:-1]))
    rs, cs = rs[first], cs[first]
    before = np.minimum.accumulate(cs)
    keep = np.concatenate(([True], cs[1:] < before[:-1]))
    return rs[keep], cs[keep]
