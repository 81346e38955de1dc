"""Argument validation shared by every public function of ``mha``.

Each check takes the argument's name and value, returns the value (converted where the
conversion is exact, e.g. a numpy int to ``int``) and otherwise raises ``ValueError`` with a
message that names the argument, says what was received (value, type, shape or dtype) and what
was expected. Checks cost O(1) in the size of tensors (shapes and dtypes only): none reads a
tensor's values, so they never add a pass over the data.

The memory guard lives here too: :func:`check_allocation` refuses, before anything is
allocated, a tensor larger than the memory budget (by default 1/8 of the machine's RAM, since
attention holds two or three score-sized tensors at once), raising :class:`MemoryBudgetError`.
Change the budget with :func:`memory_budget` (a context manager) or :func:`set_memory_budget`;
both act on the calling thread only.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping

import torch

# ---------------------------------------------------------------------------------------------
# tensors


def _describe(x: object) -> str:
    """What a wrong argument was: ``numpy.ndarray of shape (3, 4)``, ``str 'no'``, ``list [1]``."""
    cls = type(x)
    if x is None or cls in (bool, int, float, str):
        return repr(x)
    kind = cls.__name__ if cls.__module__ == "builtins" else \
        f"{cls.__module__.split('.')[0]}.{cls.__name__}"
    shape = getattr(x, "shape", None)
    if isinstance(shape, tuple | torch.Size):
        return f"{kind} of shape {tuple(shape)}"
    text = repr(x)
    return f"{kind} {text}" if len(text) <= 60 else kind


def _conversion(name: str, x: object, kind: str | None) -> str:
    """How to make a tensor of ``x`` with the dtype that fits the argument: float32 for
    ``kind="float"`` data, int64 for ``"int"`` (token ids, positions), bool for ``"bool"``;
    otherwise (``"mask"``, ``None``) the dtype ``x`` already has. A float32 copy of a bool
    mask is an additive 0/1 mask that masks nothing, and float32 token ids are refused."""
    if kind == "float":
        return f"torch.as_tensor({name}, dtype=torch.float32)"
    if kind == "int":
        return f"torch.as_tensor({name}, dtype=torch.int64) (integer ids)"
    if kind == "bool":
        return f"torch.as_tensor({name}, dtype=torch.bool)"
    own = getattr(x, "dtype", None)  # a numpy array's: as_tensor keeps bool, int64, float64
    hint = f"torch.as_tensor({name})" + (
        f", which keeps its dtype {own}" if own is not None
        else " (bools stay bool, ints int64, floats float32)")
    if kind == "mask":
        hint += ("; a bool mask must stay bool: converted to float, its 0/1 would be added to "
                 "the scores and mask nothing")
    return hint


def require_tensor(name: str, x: object, kind: str | None = None) -> torch.Tensor:
    """Return ``x`` if it is a ``torch.Tensor``; otherwise say how to make one, with the dtype
    that fits ``kind`` (see :func:`_conversion`)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(
            f"{name} must be a torch.Tensor, got {_describe(x)}; convert it explicitly, "
            f"e.g. {_conversion(name, x, kind)}"
        )
    # a sparse or nested tensor passes the dtype and shape checks, then fails deep inside
    # torch ("'NestedIntNode' object has no attribute 'add'", "reshape is not implemented for
    # sparse tensors": tester 50)
    if x.is_nested:
        raise ValueError(f"{name} is a nested tensor, and only dense ones are taken: pad it "
                         f"(torch.nested.to_padded_tensor({name}, 0.0)) and mark the padding "
                         f"with key_padding_mask where there is one")
    if x.layout is not torch.strided:
        raise ValueError(f"{name} is a {str(x.layout).removeprefix('torch.')} tensor, and only "
                         f"dense ones are taken: pass {name}.to_dense()")
    return x


def require_float_tensor(
    name: str, x: object, min_dim: int = 1, dim: int | None = None
) -> torch.Tensor:
    """Return ``x`` if it is a real floating-point tensor with ``dim`` (or >= ``min_dim``) dims."""
    require_tensor(name, x, "float")
    if not x.is_floating_point():
        raise ValueError(
            f"{name} must have a floating dtype (float32, float64, ...), got {x.dtype}; "
            f"convert it with {name}.float()"
        )
    if dim is not None and x.dim() != dim:
        raise ValueError(f"{name} must have {dim} dimensions, got shape {tuple(x.shape)}")
    if x.dim() < min_dim:
        raise ValueError(
            f"{name} must have at least {min_dim} dimensions, got shape {tuple(x.shape)}"
        )
    return x


def refuse_float8(name: str, x: torch.Tensor) -> None:
    """float8 (1 byte) is a storage format: torch has no matrix products or additions for it,
    and would stop deep inside ("add_stub not implemented for 'Float8_e4m3fn'"). ``x`` is a
    floating tensor (checked before: one attribute read here, as chapter 6 counts them)."""
    if x.dtype.itemsize == 1:
        raise ValueError(f"{name} has dtype {x.dtype}, a storage format torch does not "
                         f"compute with (no matrix products or additions); convert it with "
                         f"{name}.float()")


def require_int_tensor(name: str, x: object, dim: int | None = None) -> torch.Tensor:
    """Return ``x`` if it is an integer tensor (not bool, not floating) with ``dim`` dims."""
    require_tensor(name, x, "int")
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise ValueError(
            f"{name} must be an integer tensor (e.g. torch.int64), got {x.dtype}; convert it "
            f"with {name}.long()"
        )
    if dim is not None and x.dim() != dim:
        raise ValueError(f"{name} must have {dim} dimensions, got shape {tuple(x.shape)}")
    return x


def require_token_ids(name: str, tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """int64 or int32 ids in ``0 .. vocab_size-1`` (what ``nn.Embedding`` takes; one pass over
    the ids, never over activations)."""
    require_int_tensor(name, tokens)
    if tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must be torch.int64 or torch.int32 (what nn.Embedding "
                         f"takes), got {tokens.dtype}; convert it with {name}.long()")
    require_values(name, tokens)
    if not tokens.is_contiguous():  # reading a strided view (an expand) may copy it
        check_output_allocation("reading the ids", name, tokens, tokens.shape, tokens.dtype,
                                f"pass fewer {name}")
    # reads the ids: skipped inside torch.compile (a graph break), where nn.Embedding's own
    # check still refuses an id out of range
    if may_read_values(tokens) and tokens.numel() and (int(tokens.min()) < 0
                                                       or int(tokens.max()) >= vocab_size):
        raise ValueError(f"{name} must lie in 0..{vocab_size - 1}, got values from "
                         f"{int(tokens.min())} to {int(tokens.max())}")
    return tokens


def require_bool_tensor(name: str, x: object, shape: tuple[int, ...] | None = None
                        ) -> torch.Tensor:
    """Return ``x`` if it is a bool tensor (of ``shape``, when given)."""
    require_tensor(name, x, "bool")
    if x.dtype != torch.bool:
        raise ValueError(f"{name} must be a bool tensor, got {x.dtype}; use {name}.bool() "
                         f"(or {name} != 0)")
    if shape is not None and tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must be a bool tensor of shape {tuple(shape)}, got "
                         f"{tuple(x.shape)}")
    return x


def require_same_dtype(*named: tuple[str, torch.Tensor]) -> torch.dtype:
    """All tensors must share one dtype (no silent promotion of float32 to float64)."""
    (first, x), *rest = named
    for name, y in rest:
        if y.dtype != x.dtype:
            raise ValueError(
                f"{name} has dtype {y.dtype} but {first} has {x.dtype}; they must match: "
                f"convert one, e.g. {name}.to({first}.dtype)"
            )
    return x.dtype


def require_cached_dtype(fields: tuple[str, str], held: torch.Tensor, new: torch.Tensor,
                         fresh: str = "mha.KVCache()") -> None:
    """A cache's new entries must have the dtype of what it holds (``fields``: its two tensor
    attributes). ``torch.autocast`` is blamed only where it is on now, or where the cache holds
    its low precision and the new entries do not (filled under autocast, read without);
    otherwise the module was converted (``.double()``, ``.half()``) since it filled the cache,
    or the cache is another model's: the message names the dtypes and the fix, a new cache
    (``fresh``: how to make one for this kind of cache)."""
    if new.dtype == held.dtype:
        return
    first, second = fields
    convert = (f"cache.{first}, cache.{second} = cache.{first}.to({new.dtype}), "
               f"cache.{second}.to({new.dtype})")
    mismatch = (f"cache holds {first} of dtype {held.dtype} but this step's new {first} are "
                f"{new.dtype}")
    low_precision = (torch.float16, torch.bfloat16)
    if torch.is_autocast_enabled(new.device.type) or (
            held.dtype in low_precision and new.dtype not in low_precision):
        raise ValueError(
            f"{mismatch}: they are projections of this call's inputs, which torch.autocast "
            f"casts to its own dtype, so a cache filled under autocast must be read under the "
            f"same autocast; run every step inside one `with torch.autocast(...)` block (or "
            f"none), or convert the cache once: `{convert}`")
    raise ValueError(
        f"{mismatch}: the cache was filled in {held.dtype} (by this module before it was "
        f"converted, e.g. with .double() or .half(), or by another model). Start a new cache "
        f"({fresh}, or model.new_caches() for a TinyDecoder), or convert this one: "
        f"`{convert}`")


def require_same_device(*named: tuple[str, torch.Tensor]) -> None:
    """All tensors must live on one device."""
    (first, x), *rest = named
    # a label such as "the module" is no variable: `mask.to(the module.device)` is not code
    target = f"{first}.device" if first.isidentifier() else repr(str(x.device))
    for name, y in rest:
        if y.device != x.device:
            raise ValueError(f"{name} is on {y.device} but {first} is on {x.device}; move "
                             f"one, e.g. {name}.to({target})")


def broadcast_batch(*named: tuple[str, torch.Size | tuple[int, ...]]) -> torch.Size:
    """The broadcast of the given leading (batch) shapes, or a ValueError naming them all."""
    try:
        return torch.broadcast_shapes(*(shape for _, shape in named))
    except RuntimeError:
        listed = ", ".join(f"{name} {tuple(shape)}" for name, shape in named)
        raise ValueError(
            f"the batch dimensions must be equal (or 1, to broadcast): got {listed}"
        ) from None


def require_broadcastable_mask(mask: object, target: torch.Size) -> torch.Tensor:
    """Return ``mask`` if it is a bool or float tensor broadcasting to ``target`` without
    growing it. (A float mask of another float dtype is converted to the scores' dtype by
    the attention functions: a documented promotion, never an error from inside torch.)"""
    require_tensor("mask", mask, "mask")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise ValueError(
            f"mask must be bool (True = may attend) or floating (added to the scores), "
            f"got {mask.dtype}"
        )
    try:
        shape = torch.broadcast_shapes(mask.shape, target)
    except RuntimeError:
        shape = None
    if shape != target:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{tuple(target)}"
        )
    return mask


def check_attention_inputs(
    query: object, key: object, value: object, scale: object = None
) -> tuple[float, torch.Size]:
    """The checks every attention path makes on ``(..., n_q, d_k)``, ``(..., n_k, d_k)`` and
    ``(..., n_k, d_v)``: float tensors of one dtype and device, matching ``d_k`` (>= 1) and
    ``n_k``, leading dimensions that broadcast, and a finite ``scale`` (default
    ``1/sqrt(d_k)``). Returns ``(scale, the broadcast leading shape)``. O(1): shapes only.
    """
    for name, x in [("query", query), ("key", key), ("value", value)]:
        require_float_tensor(name, x, min_dim=2)
        refuse_float8(name, x)
    require_same_dtype(("query", query), ("key", key), ("value", value))
    require_same_device(("query", query), ("key", key), ("value", value))
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key need the same feature size d_k: query {tuple(query.shape)}, "
            f"key {tuple(key.shape)}"
        )
    if query.shape[-1] == 0:
        raise ValueError(f"query and key need d_k >= 1 features, got query "
                         f"{tuple(query.shape)}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value need the same number of tokens n_k: key {tuple(key.shape)}, "
            f"value {tuple(value.shape)}"
        )
    batch = broadcast_batch(("query", query.shape[:-2]), ("key", key.shape[:-2]),
                            ("value", value.shape[:-2]))
    if scale is None:
        return 1.0 / math.sqrt(query.shape[-1]), batch
    # any finite number is a scale: a negative one flips the ranking of the keys, 0 gives
    # uniform weights; only NaN and inf would silently poison every output
    return require_number("scale", scale), batch


def require_gradients(function: str) -> None:
    """``function`` computes gradients: under ``torch.no_grad()`` or ``torch.inference_mode()``
    torch would stop inside it, naming no cause (tester 49)."""
    if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
        raise ValueError(f"{function} computes gradients, and they are off here "
                         f"(torch.no_grad() or torch.inference_mode()): call it outside them")


def require_values(name: str, x: torch.Tensor) -> torch.Tensor:
    """Return ``x`` if it holds values: a tensor on the ``meta`` device has only a shape, and
    code that must read ``x`` (token ids, weights to draw) cannot work on it."""
    if x.device.type == "meta":
        raise ValueError(f"{name} is on the meta device, which holds shapes but no values, "
                         f"and its values are read here; pass a tensor on a real device, "
                         f"e.g. {name}.to('cpu') after filling it")
    return x


def require_module_device(name: str, x: torch.Tensor, module: torch.nn.Module,
                          module_name: str = "module") -> None:
    """``x`` must be on the device of ``module``'s parameters (torch would stop deep inside).
    ``module_name``: what the caller calls the module (``model`` for :func:`mha.generate`)."""
    param = next(module.parameters(), None)
    if param is not None and x.device != param.device:
        raise ValueError(
            f"{name} is on {x.device} but {type(module).__name__}'s parameters are on "
            f"{param.device}; move {name} with {name}.to({str(param.device)!r}) or the "
            f"{module_name} with {module_name}.to({str(x.device)!r})"
        )


def require_module_dtype(name: str, x: torch.Tensor, module: torch.nn.Module) -> None:
    """``x`` must have the dtype of ``module``'s parameters (torch would stop deep inside),
    and that dtype one torch computes with (not float8: the input would then be too)."""
    param = next(module.parameters(), None)
    if param is not None and param.is_floating_point() and param.dtype.itemsize == 1:
        raise ValueError(f"{type(module).__name__}'s parameters are {param.dtype}, a storage "
                         f"format torch does not compute with (no matrix products or "
                         f"additions); convert the module with module.float() (or "
                         f"module.to(torch.bfloat16))")
    if param is not None and param.is_floating_point() and x.dtype != param.dtype:
        raise ValueError(
            f"{name} has dtype {x.dtype} but {type(module).__name__}'s parameters are "
            f"{param.dtype}; convert {name} with {name}.to({param.dtype}) or the module with "
            f"module.to({x.dtype})"
        )


def require_features(name: str, x: object, size: int, module: torch.nn.Module) -> torch.Tensor:
    """``x`` of shape ``(batch, tokens, size)`` with ``module``'s floating dtype."""
    require_float_tensor(name, x)
    if x.dim() != 3 or x.shape[-1] != size:
        raise ValueError(f"{name} must have shape (batch, tokens, {size}), got {tuple(x.shape)}")
    require_module_dtype(name, x, module)
    require_module_device(name, x, module)
    return x


def require_head_mask(head_mask: object, heads: int, batch: int,
                      dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Gates ``(heads,)`` or ``(batch, heads)``, bool or of the module's ``dtype``, on its
    ``device``; returned as ``(1 or batch, heads, 1, 1)``, ready to multiply heads of shape
    ``(B, h, n, d)``."""
    require_tensor("head_mask", head_mask)
    if head_mask.device != device:
        raise ValueError(f"head_mask is on {head_mask.device} but the module is on {device}; "
                         f"move it with head_mask.to({str(device)!r})")
    if head_mask.is_complex() or (head_mask.is_floating_point() and head_mask.dtype != dtype):
        raise ValueError(f"head_mask must be bool or have the module's dtype {dtype}, got "
                         f"{head_mask.dtype}")
    # by number of dimensions first: comparing (B, h) with (h,) compares B with h, and under
    # torch.export that guards a dynamic batch to differ from h
    if tuple(head_mask.shape) != ((heads,) if head_mask.dim() == 1 else (batch, heads)):
        raise ValueError(f"head_mask must have shape ({heads},) or ({batch}, {heads}) for "
                         f"{heads} heads, got {tuple(head_mask.shape)}")
    if head_mask.is_floating_point():  # a NaN or inf gate turns every output NaN, not one head's
        require_finite("head_mask", head_mask, "gates are numbers, usually in [0, 1]")
    return head_mask.reshape(-1, heads, 1, 1)


def require_module(name: str, value: object,
                   kind: type | tuple[type, ...] = torch.nn.Module) -> object:
    """``value`` if it is an instance of ``kind`` (by default any ``nn.Module``; a tuple of
    classes accepts any of them)."""
    if not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        wanted = " or ".join(f"{k.__module__.split('.')[0]}.{k.__name__}" for k in kinds)
        raise ValueError(f"{name} must be a {wanted}, got {_describe(value)}")
    return value


# ---------------------------------------------------------------------------------------------
# Python scalars


def require_int(name: str, value: object, minimum: int | None = 1,
                maximum: int | None = None) -> int:
    """Return ``value`` as an ``int`` if it is an integer (not a bool) in [minimum, maximum]."""
    expected = "a positive int" if minimum == 1 else "an int" if minimum is None else \
        f"an int >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be {expected}, got {_describe(value)}")
    value = int(value)
    if minimum is not None and maximum is not None and not minimum <= value <= maximum:
        raise ValueError(f"{name} must lie in {minimum}..{maximum}, got {value}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be {expected}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be an int <= {maximum}, got {value}")
    return value


#: The largest seed torch's ``manual_seed`` takes (it takes -2**63 too); above it torch says
#: "Overflow when unpacking long long", naming nothing.
SEED_MAX = 2**64 - 1


def require_seed(name: str, value: object, minimum: int | None = 0,
                 maximum: int = SEED_MAX) -> int:
    """Return ``value`` as an ``int`` seed in [minimum, maximum] (``minimum=None``: torch's own
    lower end, -2**63); ``maximum`` lower than SEED_MAX where the seed is scaled before use."""
    return require_int(name, value, -2**63 if minimum is None else minimum, maximum)


def require_optional_int(name: str, value: object, minimum: int = 1) -> int | None:
    """``None``, or an int as :func:`require_int` wants it."""
    return None if value is None else require_int(name, value, minimum)


def require_flag(name: str, value: object) -> bool:
    """Return ``value`` if it is a real bool: ``"no"``, 0 or None are not flags."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {_describe(value)}")
    return value


def refuse_autograd_history(cache: str, held: tuple, first: str, second: str) -> None:
    """Raise ``ValueError`` if a cache about to be deep-copied holds a tensor with autograd
    history: torch cannot deepcopy a non-leaf tensor, and its own error does not say why."""
    if any(t is not None and t.grad_fn is not None for t in held):
        raise ValueError(f"this {cache} holds {first} with autograd history, which deepcopy "
                         f"cannot copy: fill it under torch.no_grad(), or copy the detached "
                         f"tensors (new.{first} = cache.{first}.detach().clone(), and "
                         f"{second} alike)")


def refuse_vmap_leftovers(cache: str, cached: torch.Tensor | None, new: torch.Tensor,
                          what: str) -> None:
    """Raise ``ValueError`` if a cache filled inside ``torch.func.vmap`` is used outside it:
    it holds vmap's batched tensors, and torch's own error is an internal assert."""
    if (cached is not None and not torch.compiler.is_compiling()
            and torch._C._functorch.is_functorch_wrapped_tensor(cached)
            and not torch._C._functorch.is_functorch_wrapped_tensor(new)):
        raise ValueError(f"this {cache} was filled inside torch.func.vmap and holds its "
                         f"batched tensors, which do not outlive it: use a new {cache} here "
                         f"(inside vmap, pass {what} in and out as tensors)")


def require_str(name: str, value: object) -> str:
    """Return ``value`` if it is a str (a label or a symbol, not a number)."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a str, got {_describe(value)}")
    return value


def require_number(
    name: str,
    value: object,
    *,
    greater_than: float | None = None,
    at_least: float | None = None,
    finite: bool = True,
) -> float:
    """Return ``value`` as a ``float`` if it is a real number (not a bool) in range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        hint = "; pass a Python number (tensor.item())" if isinstance(value, torch.Tensor) else ""
        raise ValueError(f"{name} must be a real number, got {_describe(value)}{hint}")
    if torch.compiler.is_compiling():
        # torch.compile(dynamic=True) traces a float (a module's rotary base) as a value it
        # cannot branch on; eager mode checks the number (a module's, at construction)
        return value
    try:
        value = float(value)
    except OverflowError:  # an int too large for a float, e.g. 10**400
        raise ValueError(f"{name} must be a finite number, got an int of "
                         f"{len(str(value))} digits") from None
    if math.isnan(value) or (finite and math.isinf(value)):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if greater_than is not None and not value > greater_than:
        expected = "positive" if greater_than == 0 else f"a number greater than {greater_than:g}"
        raise ValueError(f"{name} must be {expected}, got {value:g}")
    if at_least is not None and not value >= at_least:
        raise ValueError(f"{name} must be at least {at_least:g}, got {value:g}")
    return value


def require_positive(name: str, value: object) -> float:
    """A finite number > 0 (a scale, a temperature, a width)."""
    return require_number(name, value, greater_than=0.0)


def require_probability(name: str, value: object) -> float:
    """A dropout probability: a number in [0, 1)."""
    value = require_number(name, value, at_least=0.0)
    if not value < 1.0:
        raise ValueError(f"{name} must lie in [0, 1), got {value:g}")
    return value


def require_base(value: object) -> float:
    """The base of the sinusoidal frequencies: a finite number > 1."""
    return require_number("base", value, greater_than=1.0)


def require_float_dtype(name: str, dtype: object) -> torch.dtype:
    """``dtype`` if it is a real floating torch dtype; ``None`` means torch's default dtype."""
    if dtype is None:
        return torch.get_default_dtype()
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        hint = f" (use torch.{dtype})" if isinstance(dtype, str) else ""
        raise ValueError(
            f"{name} must be a floating torch dtype such as torch.float32 or torch.float64, "
            f"got {_describe(dtype)}{hint}"
        )
    return dtype


def require_choice(name: str, value: object, choices: Iterable[object]) -> object:
    """``value`` if it is one of ``choices``."""
    choices = tuple(choices)
    if not isinstance(value, str | int) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {_describe(value)}")
    return value


def require_callable(name: str, value: object) -> object:
    """``value`` if it can be called."""
    if not callable(value):
        raise ValueError(f"{name} must be a function, got {_describe(value)}")
    return value


def require_generator(name: str, value: object,
                      required: bool = False) -> torch.Generator | None:
    """A ``torch.Generator``, or ``None`` unless ``required`` (the global generator would make
    a batch irreproducible)."""
    if value is None and required:
        raise ValueError(f"{name} must be a torch.Generator, got None; make one with "
                         f"torch.Generator().manual_seed(0)")
    if value is not None and not isinstance(value, torch.Generator):
        raise ValueError(f"{name} must be a torch.Generator (or None), got {_describe(value)}; "
                         f"make one with torch.Generator().manual_seed(0)")
    return value


def require_shape(name: str, shape: object, length: int | None = None) -> tuple[int, ...]:
    """A tuple of positive ints (of ``length`` entries, when given), e.g. ``(layers, heads)``."""
    if isinstance(shape, str | bytes) or not isinstance(shape, Iterable):
        raise ValueError(f"{name} must be a tuple of positive ints, got {_describe(shape)}")
    items = list(shape)
    if length is not None and len(items) != length:
        raise ValueError(f"{name} must have {length} entries, got {_describe(shape)}")
    return tuple(require_int(f"{name}[{i}]", size) for i, size in enumerate(items))


def require_indices(name: str, indices: object, size: int, what: str = "head") -> list[int]:
    """A list of distinct ints in ``0 .. size-1`` from a list, tuple, range or 1-D int tensor.

    A bare int, a string, floats or bools are refused: ``[0.7]`` is not head 0 and ``"12"``
    is not heads 1 and 2.
    """
    if isinstance(indices, torch.Tensor) and indices.dtype == torch.bool:
        # a mask of which heads, not their indices: .long() would make [0, 1, 0, 0] of it
        raise ValueError(f"{name} must hold {what} indices, got a bool tensor (a mask of "
                         f"which {what}s?); pass the indices of its True entries, "
                         f"{name}.nonzero().flatten()")
    if isinstance(indices, torch.Tensor):
        require_int_tensor(name, indices, dim=1)
        indices = indices.tolist()
    if isinstance(indices, str | bytes | Mapping) or not isinstance(indices, Iterable):
        raise ValueError(f"{name} must be a list of {what} indices, e.g. [0, 2], got "
                         f"{_describe(indices)}")
    items = list(indices)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, numbers.Integral):
            raise ValueError(f"{name} must hold int {what} indices, got {_describe(item)} in "
                             f"{items!r}")
    items = [int(i) for i in items]
    outside = [i for i in items if not 0 <= i < size]
    if outside:
        raise ValueError(f"{name} must lie in 0..{size - 1}, got {outside} in {items}")
    if len(set(items)) != len(items):
        raise ValueError(f"{name} must not repeat a {what} index, got {items}")
    return items


# ---------------------------------------------------------------------------------------------
# checks that read values: the debug switch

_debug = os.environ.get("MHA_DEBUG", "1").strip().lower() not in ("0", "false", "no", "off")


def set_debug(flag: bool) -> bool:
    """Turn on or off the checks that read tensor values on the host; returns the previous
    setting. On by default (``MHA_DEBUG=0`` in the environment starts with them off).

    Only one such check sits on a main path: the fused path of :class:`mha.MultiHeadAttention`
    looks at Q, K and V (and the cache's keys and values): whether each one's sum is finite,
    and element by element (``isfinite(t).all()``) only where it is not, since a sum of finite
    float16 values can overflow (:func:`all_finite`), and at a float mask
    (``isnan``), and for NaN or inf computes in the open so that nothing non-finite is hidden
    (the rule of :func:`mha.attention`). That look is a host synchronisation per call on a
    GPU and a data-dependent branch that ``torch.compile(fullgraph=True)`` and
    ``torch.func.vmap`` cannot trace. With the switch
    off, and always inside ``torch.compile`` or a ``torch.func`` transform and on ``meta``
    tensors (shapes without values: the layer then runs on meta, as torch's does), it is skipped:
    finite inputs give the same outputs, and non-finite inputs give whatever PyTorch's fused
    kernel gives (it may turn a query whose scores are all NaN into zeros, and its causal
    kernel never reads a future key, so a NaN there does not reach earlier queries).

    The switch is process-wide, not per thread (unlike :func:`mha.memory_budget`): a thread
    that turns it off turns it off for every thread, until one turns it back on.

    Raises ``ValueError`` naming ``flag`` when it is not a bool.
    """
    global _debug
    previous = _debug
    _debug = require_flag("flag", flag)
    return previous


def get_debug() -> bool:
    """Whether the value-reading checks of :func:`set_debug` are on.

    Raises nothing."""
    return _debug


def may_read_values(x: torch.Tensor) -> bool:
    """Whether code may branch on ``x``'s values on the host: in eager mode, outside
    ``torch.compile`` and ``torch.func`` transforms (vmap, grad) that cannot trace such a
    branch. Code that says no takes the branch-free route (same results for finite inputs)."""
    if torch.compiler.is_compiling() or x.device.type == "meta":  # meta: shapes, no values
        return False
    return not torch._C._functorch.is_functorch_wrapped_tensor(x)



def all_finite(tensors) -> bool:
    """Whether every element of every tensor in ``tensors`` (floating) is finite, exactly as
    ``all(bool(torch.isfinite(t).all()) for t in tensors)`` says, for less: one sum per tensor
    first (a NaN or inf element makes the sum NaN or inf, so a finite sum proves the tensor
    finite); only a tensor whose sum is not finite (a non-finite element, or finite values
    that overflow, e.g. in float16) is looked at element by element. One host sync when all
    sums are finite."""
    tensors = list(tensors)
    sums = torch.stack([t.sum().to(torch.float64) for t in tensors])
    finite_sums = torch.isfinite(sums)
    if bool(finite_sums.all()):
        return True
    return all(bool(torch.isfinite(t).all())
               for t, ok in zip(tensors, finite_sums.tolist(), strict=True) if not ok)


def under_vmap() -> bool:
    """Whether the code runs inside ``torch.func.vmap`` (at any level of torch.func's stack);
    False inside ``torch.compile``, which would not trace the look."""
    if torch.compiler.is_compiling():
        return False
    try:
        from torch._C._functorch import TransformType, get_interpreter_stack
    except ImportError:  # a torch without this private API: assume not
        return False
    return any(level.key() == TransformType.Vmap for level in get_interpreter_stack() or ())


def require_no_nan(name: str, x: torch.Tensor, hint: str) -> torch.Tensor:
    """Return ``x`` if it holds no NaN (reads its values: skipped where
    :func:`may_read_values` says no); ``hint`` says where the NaN probably came from."""
    if may_read_values(x) and bool(x.isnan().any()):
        raise ValueError(f"{name} holds NaN ({int(x.isnan().sum())} of {x.numel()} values); "
                         f"{hint}")
    return x


def require_finite(name: str, x: torch.Tensor, hint: str) -> torch.Tensor:
    """Return ``x`` if it holds no NaN or inf (reads its values: skipped where
    :func:`may_read_values` says no); ``hint`` says what the values should be."""
    if may_read_values(x) and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} holds NaN or inf ({int((~torch.isfinite(x)).sum())} of "
                         f"{x.numel()} values); {hint}")
    return x


def require_binary_mask(name: str, x: torch.Tensor) -> torch.Tensor:
    """Return ``x`` if it is a 0/1 padding mask (1/True = real token): bool, integer, or
    floating holding only 0.0 and 1.0. BERT's additive "extended" form (0 real, -10000 pad)
    would otherwise be read backwards, and a 2 differently by each reader. The values are
    read where :func:`may_read_values` says yes."""
    require_tensor(name, x)
    if x.is_complex() or (x.is_floating_point() and x.dtype.itemsize == 1):
        raise ValueError(f"{name} must be a 0/1 mask (bool, integer or float), got {x.dtype}; "
                         f"pass {name}.real.long() or a bool tensor, True = real token")
    if may_read_values(x) and x.numel():
        bad = (x != 0) & (x != 1)  # NaN is != 0 and != 1
        if bool(bad.any()):
            shown = sorted({float(v) for v in x[bad].flatten()[:1000].tolist()})[:5]
            raise ValueError(
                f"{name} must hold only 0 (padding) and 1 (real token), got values such as "
                f"{shown}; an additive mask (0 real, -10000 or -inf padding) is not read "
                f"here: pass ({name} == 0).long() for one of those, or "
                f"({name} != 0).long() to count every non-zero value as a real token")
    return x


def require_within(name: str, x: torch.Tensor, limit: float, hint: str) -> torch.Tensor:
    """Return ``x`` if every ``|value| <= limit`` (reads its values: skipped where
    :func:`may_read_values` says no, as inside ``torch.compile`` and ``torch.export``)."""
    if may_read_values(x) and x.numel() and float(x.abs().max()) > limit:
        # the value itself, exactly for integers (2**32 + 1 and the limit 2**32 both printed
        # as 4.29497e+09), with its sign
        worst = x.flatten()[x.abs().argmax()].item()
        bound = int(limit) if float(limit).is_integer() else limit
        raise ValueError(f"{name} must lie within +-{bound!r}, got {worst!r}; {hint}")
    return x


def require_nonempty(name: str, items: object, hint: str = "") -> list:
    """Return ``items`` as a list if it has at least one element."""
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise ValueError(f"{name} must be a list of items, got {_describe(items)}")
    items = list(items)
    if not items:
        raise ValueError(f"{name} must hold at least one item, got none{hint}")
    return items


def require_distributions(name: str, weights: torch.Tensor) -> torch.Tensor:
    """Return ``weights`` if its last dimension holds probability distributions: values in
    [0, 1], each row summing to 1 (or to 0: a query that may attend to nothing)."""
    tolerance = max(1e-3, 10 * torch.finfo(weights.dtype).eps)
    sums = weights.sum(dim=-1)
    near_one = (sums - 1).abs() <= tolerance
    near_zero = sums.abs() <= tolerance
    if bool((weights < 0).any()) or not bool((near_one | near_zero).all()):
        worst = float((sums - 1).abs().max())
        raise ValueError(f"{name} must be attention weights: values >= 0 with each row (last "
                         f"dimension) summing to 1, got row sums up to {worst:.3g} away from "
                         f"1 and minimum value {float(weights.min()):.3g}; pass softmax "
                         f"outputs, not scores")
    return weights


# ---------------------------------------------------------------------------------------------
# the memory guard


class MemoryBudgetError(MemoryError, ValueError):
    """A tensor larger than the memory budget was asked for (raised before allocating it).

    A subclass of ``MemoryError`` and ``ValueError``, so ``except ValueError`` catches it with
    every other bad argument. Raises nothing itself."""


#: fraction of the machine's RAM one tensor may take by default
DEFAULT_FRACTION = 1 / 8
_FALLBACK_RAM = 8 * 2**30  # when the OS does not say (a laptop-sized guess)
# the budget is per thread, as torch's grad mode is: one thread's setting never reaches another
_thread = threading.local()  # .budget: this thread's setting, None for the default


def _read_machine_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return _FALLBACK_RAM


# read once at import: constants that torch.compile can trace (os.sysconf it cannot, and a
# float it would make symbolic under dynamic=True)
_MACHINE_MEMORY = _read_machine_memory()
_DEFAULT_BUDGET = int(_MACHINE_MEMORY * DEFAULT_FRACTION)


def machine_memory() -> int:
    """Bytes of physical memory of this machine (8 GiB where the OS does not tell)."""
    return _MACHINE_MEMORY


def get_memory_budget() -> int:
    """The largest tensor, in bytes, that ``mha`` allocates without complaint in this thread.

    Raises nothing."""
    chosen = getattr(_thread, "budget", None)
    return _DEFAULT_BUDGET if chosen is None else chosen


def set_memory_budget(nbytes: int | None) -> int | None:
    """Set the calling thread's budget in bytes (``None``: back to 1/8 of RAM); returns the
    previous setting. Per thread, as ``torch.set_grad_enabled`` is: other threads keep
    theirs, and a new thread starts with the default.

    Raises ``ValueError`` naming ``nbytes`` when it is neither None nor a positive int."""
    previous = getattr(_thread, "budget", None)
    _thread.budget = None if nbytes is None else require_int("nbytes", nbytes, minimum=1)
    return previous


@contextlib.contextmanager
def memory_budget(nbytes: int | None) -> Iterator[None]:
    """``with mha.memory_budget(2 * 2**30): ...`` runs the block with another budget
    (``None``: 1/8 of RAM) in the calling thread, and restores the thread's setting after
    it (blocks nest; other threads are not affected).

    Under ``torch.compile`` the budget is a constant of the graph: Dynamo guards on it, so
    each new budget compiles the call again. A call over the budget raises
    :class:`MemoryBudgetError` without ``fullgraph``; with ``fullgraph=True`` Dynamo cannot let
    an exception raised while tracing leave the graph, and raises
    ``torch._dynamo.exc.Unsupported`` ("Observed exception") instead, whose message quotes the
    MemoryBudgetError and its hint: catch that, or drop ``fullgraph`` where a call may exceed
    the budget (``tests/test_compile.py`` checks both).

    Raises ``ValueError`` naming ``nbytes`` when it is neither None nor a positive int."""
    previous = set_memory_budget(nbytes)
    try:
        yield
    finally:
        set_memory_budget(previous)


def _gib(nbytes: int) -> str:
    if torch.compiler.is_compiling():  # a traced size takes no format spec
        return f"{nbytes} bytes"
    return f"{nbytes / 2**30:.3g} GiB"


def _nbytes(shape: Iterable[int], dtype: torch.dtype) -> int:
    """Bytes of a tensor of ``shape`` and ``dtype``, as a Python int (no overflow). Sizes that
    are ``torch.SymInt`` (``torch.compile`` with dynamic shapes) stay symbolic: ``int()`` would
    specialise them to one value and recompile for every other."""
    nbytes = dtype.itemsize
    for size in shape:  # a loop: torch.compile cannot trace math.prod over a generator
        nbytes *= size if isinstance(size, torch.SymInt) else int(size)
    return nbytes


def check_allocation(what: str, shape: Iterable[int], dtype: torch.dtype,
                     hint: str | Callable[[], str]) -> None:
    """Raise :class:`MemoryBudgetError` if a tensor of ``shape`` and ``dtype`` is over budget.
    ``hint`` says which argument to make smaller, with its value (e.g. ``use a smaller
    embed_dim (4096)``); a function returning the hint builds it only when needed, so that a
    hint quoting sizes costs nothing (and specialises nothing under ``torch.compile``) when
    the check passes.

    O(1): multiplies the sizes as Python ints (no overflow) and allocates nothing.
    """
    shape = tuple(shape)
    nbytes, budget = _nbytes(shape, dtype), get_memory_budget()
    if nbytes > budget:
        hint = hint() if callable(hint) else hint
        sizes = tuple([int(s) for s in shape])  # plain ints to print, traced or not
        raise MemoryBudgetError(
            f"{what} would need a tensor of shape {sizes} ({dtype}) = {_gib(int(nbytes))}, "
            f"over the memory budget of {_gib(budget)}: {hint}, or raise the budget with "
            f"mha.memory_budget(nbytes)"
        )


def check_output_allocation(what: str, name: str, x: torch.Tensor, shape: Iterable[int],
                            dtype: torch.dtype, hint: str | Callable[[], str]) -> None:
    """:func:`check_allocation` for a tensor whose size follows from the shape of the tensor
    argument ``name`` (``x``), e.g. an output or activation: the message names ``name`` and its
    shape. A stride-0 view (``expand``) costs nothing itself but not what is computed from it.
    """
    shape = tuple(shape)
    if _nbytes(shape, dtype) > get_memory_budget():  # the message only when it is needed
        check_allocation(f"{what} for {name} of shape {tuple(x.shape)}", shape, dtype, hint)
