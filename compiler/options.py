"""One frozen, keyword-only options object for a compile (`CompileOptions`): everything that
changes what the stages produce; its fields are listed on the class. Its `key()` is a stable
hash (recorded in artifacts; the options part of a cache key). See docs/ARCHITECTURE.md,
"Layout", and docs/GUIDE.md, "As a library".
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields, replace

from .plan.hardware import HardwareProfile

COMPILE_TARGETS = ("gpu", "cpu")
MATH_MODES = ("fast", "accurate")
CONV_LAYOUTS = ("auto", "channels-last", "nchw")


class OptionsError(ValueError):
    """Options that do not fit together or name nothing (a user error)."""


@dataclass(frozen=True, kw_only=True)
class CompileOptions:
    """The options of a compile:

    target       'gpu' (kernels for cuda / cuda-sim) or 'cpu' (numba parallel loops)
    hardware     the profile the cost model plans for (compiler/plan/hardware.py); None: the
                 H200 datasheet for gpu (the cpu profile is measured, so a cpu compile must be
                 given one: compiler/calibrate.py `hardware_profile`)
    fuse         False: the unfused build (one kernel per linalg op) is the one that runs
    baseline     also build the unfused build beside the fused one (for the speedup line)
    disabled_passes  graph passes switched off by name (compiler/transforms/graph.py)
    plans        hand-given plans by chain: (chain, plan JSON) pairs
                 ({"groups": [{"ops": [...], "block_tiles": [...], "thread_tiles": [...]}]})
    autotune     time the model's best tile candidates and keep the fastest (cached on disk)
    tuned        measured tiles by group signature, JSON (what autotuning found; set by the
                 pipeline, or given to pin them)
    locations    print loc(...) in the stages' IR text
    kernel_report  measure every GPU kernel (compiler/report: ptxas resources, occupancy,
                 coalescing) and price the plan with the measured resources
    dynamic      symbols whose extent the kernels take at run time (cpu, cuda): a build is
                 planned for a size class of each (its power-of-two bucket, compiler/dynamic.py)
                 and runs any extent
    math         'fast' (the default): the cpu target's f32 exp and tanh are f32 polynomial forms
                 (within 3 and 5 ulp); 'accurate': f64 forms rounded once (within 1 ulp), at a
                 time cost (docs/PERFORMANCE.md, "Transcendental accuracy"). The gpu target calls
                 libdevice either way; erf is libm's on the cpu either way
    conv_layout  a 16-bit conv whose channels make 16-byte runs (groups 1, static shapes):
                 'auto' (the default): on the gpu target both forms are lowered and planned and
                 the cheaper plan is kept (compiler/pipeline.py: _conv_layout; the cpu target,
                 a hand plan and run-time extents keep channels-last); 'channels-last' or
                 'nchw': that form, unpriced (tests, and autotuning's candidates)
    """

    target: str = "gpu"
    hardware: HardwareProfile | None = None
    fuse: bool = True
    baseline: bool = True
    disabled_passes: frozenset[str] = frozenset()
    plans: tuple[tuple[str, str], ...] = ()
    autotune: bool = False
    tuned: str | None = None
    locations: bool = False
    kernel_report: bool = False
    dynamic: tuple[str, ...] = ()
    math: str = "fast"
    conv_layout: str = "auto"

    def __post_init__(self):
        if self.target not in COMPILE_TARGETS:
            raise OptionsError(f"unknown compile target {self.target!r}; expected one of {', '.join(COMPILE_TARGETS)}")
        if not isinstance(self.disabled_passes, frozenset):
            object.__setattr__(self, "disabled_passes", frozenset(self.disabled_passes))
        if isinstance(self.dynamic, str):
            object.__setattr__(self, "dynamic", tuple(s.strip() for s in self.dynamic.split(",") if s.strip()))
        object.__setattr__(self, "dynamic", tuple(sorted(set(self.dynamic))))
        if self.math not in MATH_MODES:
            raise OptionsError(f"math: unknown mode {self.math!r}; expected one of {', '.join(MATH_MODES)}")
        if self.conv_layout not in CONV_LAYOUTS:
            raise OptionsError(f"conv_layout: unknown layout {self.conv_layout!r}; expected one of "
                               f"{', '.join(CONV_LAYOUTS)}")
        bad = [s for s in self.dynamic if not isinstance(s, str) or not s.isidentifier()]
        if bad:
            raise OptionsError(f"dynamic: {', '.join(map(repr, bad))} {'is not a symbol name' if len(bad) == 1 else 'are not symbol names'}")

    @classmethod
    def make(cls, options: "CompileOptions | dict | None" = None, **overrides) -> "CompileOptions":
        """From an options object or a dict of its fields (plans may be a {chain: plan dict};
        disabled_passes any iterable), with `overrides` applied on top."""
        if isinstance(options, CompileOptions):
            return replace(options, **overrides) if overrides else options
        d = dict(options or {}, **overrides)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise OptionsError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                               f"known: {', '.join(sorted(known))}")
        if isinstance(d.get("plans"), dict):
            d["plans"] = tuple(sorted((k, v if isinstance(v, str) else json.dumps(v, sort_keys=True))
                                      for k, v in d["plans"].items()))
        if "disabled_passes" in d:
            d["disabled_passes"] = frozenset(d["disabled_passes"])
        return cls(**d)

    def plan_for(self, chain: str) -> dict | None:
        """The hand-given plan of `chain`, if any."""
        text = dict(self.plans).get(chain)
        return json.loads(text) if text else None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["hardware"] = self.hardware.as_dict() if self.hardware else None
        d["disabled_passes"] = sorted(self.disabled_passes)
        d["plans"] = [list(p) for p in self.plans]
        d["dynamic"] = list(self.dynamic)
        if not self.dynamic:
            del d["dynamic"]            # keys of options without it stay what they were
        if self.math == "fast":
            del d["math"]               # the same for the default math mode
        if self.conv_layout == "auto":
            del d["conv_layout"]        # and for the default conv layout
        return d

    def key(self) -> str:
        """A stable hash of everything here (hardware by its full contents), computed once per
        options object (they are frozen; the compile cache asks for it several times a build)."""
        key = self.__dict__.get("_key")
        if key is None:
            text = json.dumps(self.as_dict(), sort_keys=True, default=str)
            key = hashlib.sha256(text.encode()).hexdigest()[:16]
            object.__setattr__(self, "_key", key)
        return key
