"""Optimizers and learning-rate schedules written from the lectures' formulas.

One small class per algorithm, each a ``torch.optim.Optimizer`` whose docstring is its update
rule (θ parameters, g gradient, α learning rate, t the step counted from 1). They are written
for reading, not speed: one parameter at a time, out-of-place arithmetic. Hyperparameters and
defaults follow ``torch.optim`` so that ``suites/test_optimizers.py`` can prove each one equal
to its twin there; state entries that hold the same quantity carry torch's name for it, so that
the comparison looks at them too.

Every optimizer here shares two conventions of torch.optim, applied before its rule:
``maximize`` negates the gradient, and ``weight_decay`` λ adds λθ to it (coupled L2 decay;
AdamW instead shrinks θ by αλ first).
"""

# The docstrings are the update rules, written with the lectures' Greek letters.
# ruff: noqa: RUF002

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Any, Callable

import torch
from torch.optim import Optimizer

Params = Iterable[Any]


class Rule(Optimizer):
    """Steps every parameter that has a gradient with :meth:`update`; counts steps in ``step``."""

    decoupled_weight_decay = False

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                state["step"] = state.get("step", 0) + 1
                self.update(param, self.gradient(param, group), state, group)
        return loss

    def gradient(self, param: torch.Tensor, group: dict[str, Any]) -> torch.Tensor:
        """The gradient the rule sees: negated to maximize, plus coupled weight decay λθ."""
        grad = -param.grad if group.get("maximize") else param.grad
        decay = group.get("weight_decay", 0.0)
        if decay and not self.decoupled_weight_decay:
            # rounded once, as torch.optim adds it: where the decay nearly cancels a maximized
            # gradient, rounding λθ first left RMSprop's momentum 43 float32 steps off torch's
            grad = grad.add(param, alpha=decay)
        return grad

    def update(
        self, param: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        raise NotImplementedError


class SGD(Rule):
    """Gradient descent, with momentum (heavy ball or Nesterov) in torch's form.

    μ = 0:        θ ← θ - α g
    momentum:     v ← g on the first step, then v ← μ v + (1 - τ) g   (τ: dampening)
                  θ ← θ - α v                   (heavy ball)
                  θ ← θ - α (g + μ v)           (Nesterov: the look-ahead gradient)

    The lectures write v ← μ v + α g, θ ← θ - v; for a constant α that is the same sequence.
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        maximize: bool = False,
    ) -> None:
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum needs momentum > 0 and no dampening")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def update(
        self, param: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        mu = group["momentum"]
        direction = grad
        if mu:
            if "momentum_buffer" in state:
                velocity = mu * state["momentum_buffer"] + (1 - group["dampening"]) * grad
            else:
                velocity = grad.clone()
            state["momentum_buffer"] = velocity
            direction = grad + mu * velocity if group["nesterov"] else velocity
        param.sub_(group["lr"] * direction)


class LectureMomentum(Rule):
    """Momentum as the lectures write it: v ← μ v + α g ; θ ← θ - v (α folded into v)."""

    def __init__(self, params: Params, lr: float = 1e-3, momentum: float = 0.9) -> None:
        super().__init__(params, dict(lr=lr, momentum=momentum))

    def update(
        self, param: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        velocity = group["momentum"] * state.get("velocity", 0.0) + group["lr"] * grad
        state["velocity"] = velocity
        param.sub_(velocity)


class Adagrad(Rule):
    """Adagrad: each coordinate's step shrinks with the squared gradients it has seen.

    G ← G + g²                       (G starts at initial_accumulator_value)
    α_t = α / (1 + (t - 1) · lr_decay)
    θ ← θ - α_t g / (√G + ε)
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        maximize: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            lr_decay=lr_decay,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            eps=eps,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def update(
        self, param: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        start = torch.full_like(param, group["initial_accumulator_value"])
        total = state.get("sum", start) + grad * grad
        state["sum"] = total
        lr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        param.sub_(lr * grad / (total.sqrt() + group["eps"]))


class Adadelta(Rule):
    """Adadelta: the step's own running RMS sets its size, so the units match θ's.

    E[g²] ← ρ E[g²] + (1 - ρ) g²
    Δ = √(E[Δ²] + ε) / √(E[g²] + ε) · g       (E[Δ²] from the previous step)
    E[Δ²] ← ρ E[Δ²] + (1 - ρ) Δ²
    θ ← θ - α Δ                                 (α = 1 in the original paper)
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def update(
        self, param: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        rho, eps = group["rho"], group["eps"]
        square_avg = ema(state.get("square_avg"), grad * grad, rho)
        previous = state.get("acc_delta", torch.zeros_like(param))
        delta = (previous + eps).sqrt() / (square_avg + eps).sqrt() * grad
        state["square_avg"] = square_avg
        state["acc_delta"] = ema(previous, delta * delta, rho)
        param.sub_(group["lr"] * delta)


class RMSprop(Rule):
    """RMSprop: divide by a running RMS of the gradient; centered, by its running deviation.

    E[g²] ← a E[g²] + (1 - a) g²                (a: alpha, the smoothing constant)
    centered: E[g] ← a E[g] + (1 - a) g ;  d = √(E[g²] - E[g]²) + ε
    otherwise: d = √E[g²] + ε
    momentum μ > 0: b ← μ b + g / d ;  θ ← θ - α b
    otherwise:      θ ← θ - α g / d
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        maximize: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            alpha=alpha,
            eps=eps,
            weight_decay=weight_decay,
            momentum=momentum,
            centered=centered,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def update(
        self, param: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        alpha = group["alpha"]
        square_avg = ema(state.get("square_avg"), grad * grad, alpha)
        state["square_avg"] = square_avg
        if group["centered"]:
            grad_avg = ema(state.get("grad_avg"), grad, alpha)
            state["grad_avg"] = grad_avg
            denom = (square_avg - grad_avg * grad_avg).sqrt() + group["eps"]
        else:
            denom = square_avg.sqrt() + group["eps"]
        step = grad / denom
        if group["momentum"] > 0:
            step = group["momentum"] * state.get("momentum_buffer", 0.0) + step
            state["momentum_buffer"] = step
        param.sub_(group["lr"] * step)


class Adam(Rule):
    """Adam: momentum on g and a running mean of g², both bias-corrected.

    m ← β₁ m + (1 - β₁) g ;  v ← β₂ v + (1 - β₂) g²
    m̂ = m / (1 - β₁ᵗ) ;  v̂ = v / (1 - β₂ᵗ)          (amsgrad: v̂ from the largest v so far)
    θ ← θ - α m̂ / (√v̂ + ε)
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        maximize: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def update(
        self, param: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        (beta1, beta2), t = group["betas"], state["step"]
        if self.decoupled_weight_decay:
            param.mul_(1 - group["lr"] * group["weight_decay"])
        m = ema(state.get("exp_avg"), grad, beta1)
        v = ema(state.get("exp_avg_sq"), grad * grad, beta2)
        state["exp_avg"], state["exp_avg_sq"] = m, v
        if group["amsgrad"]:
            v = torch.maximum(state.get("max_exp_avg_sq", v), v)
            state["max_exp_avg_sq"] = v
        m_hat = m / (1 - beta1**t)
        v_hat = v / (1 - beta2**t)
        param.sub_(group["lr"] * m_hat / (v_hat.sqrt() + group["eps"]))


class AdamW(Adam):
    """AdamW: Adam whose weight decay shrinks θ directly, θ ← θ (1 - αλ), outside m and v."""

    decoupled_weight_decay = True

    def __init__(
        self, params: Params, lr: float = 1e-3, weight_decay: float = 1e-2, **kw: Any
    ) -> None:
        super().__init__(params, lr=lr, weight_decay=weight_decay, **kw)


class Adamax(Rule):
    """AdaMax: Adam with the infinity norm in place of the root mean square.

    m ← β₁ m + (1 - β₁) g ;  u ← max(β₂ u, |g| + ε)
    θ ← θ - α / (1 - β₁ᵗ) · m / u
    (torch adds ε inside the max, which keeps u above zero.)
    """

    def __init__(
        self,
        params: Params,
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def update(
        self, param: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        (beta1, beta2), t = group["betas"], state["step"]
        m = ema(state.get("exp_avg"), grad, beta1)
        u = torch.maximum(
            beta2 * state.get("exp_inf", torch.zeros_like(param)), grad.abs() + group["eps"]
        )
        state["exp_avg"], state["exp_inf"] = m, u
        param.sub_(group["lr"] / (1 - beta1**t) * m / u)


class NAdam(Rule):
    """NAdam: Adam with Nesterov momentum and torch's momentum schedule (momentum_decay ψ).

    μ_t = β₁ (1 - ½ · 0.96^(t ψ)) ;  Π_t = μ₁ μ₂ ⋯ μ_t
    m ← β₁ m + (1 - β₁) g ;  v ← β₂ v + (1 - β₂) g² ;  v̂ = v / (1 - β₂ᵗ)
    θ ← θ - α (1 - μ_t) / (1 - Π_t) · g / (√v̂ + ε) - α μ_{t+1} / (1 - Π_t μ_{t+1}) · m / (√v̂ + ε)
    """

    def __init__(
        self,
        params: Params,
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum_decay: float = 4e-3,
        maximize: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            momentum_decay=momentum_decay,
            maximize=maximize,
        )
        super().__init__(params, defaults)

    def update(
        self, param: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
    ) -> None:
        (beta1, beta2), t, lr = group["betas"], state["step"], group["lr"]

        def mu(step: int) -> float:
            return beta1 * (1 - 0.5 * 0.96 ** (step * group["momentum_decay"]))

        product = state.get("mu_product", 1.0) * mu(t)
        state["mu_product"] = product
        m = ema(state.get("exp_avg"), grad, beta1)
        v = ema(state.get("exp_avg_sq"), grad * grad, beta2)
        state["exp_avg"], state["exp_avg_sq"] = m, v
        denom = (v / (1 - beta2**t)).sqrt() + group["eps"]
        now = lr * (1 - mu(t)) / (1 - product) * grad / denom
        ahead = lr * mu(t + 1) / (1 - product * mu(t + 1)) * m / denom
        param.sub_(now + ahead)


def ema(average: torch.Tensor | None, value: torch.Tensor, decay: float) -> torch.Tensor:
    """One step of an exponential moving average that starts at zero."""
    if average is None:
        average = torch.zeros_like(value)
    return decay * average + (1 - decay) * value


# Learning-rate schedules: the rate for step t (counted from 0, as torch's schedulers and
# MXNet's num_update - 1 count), as a pure function of t.


def step_decay(t: int, base_lr: float, step_size: int, gamma: float = 0.1) -> float:
    """Multiply by γ every ``step_size`` steps: α γ^⌊t / step_size⌋ (torch's StepLR)."""
    return base_lr * gamma ** (t // step_size)


def multi_step(t: int, base_lr: float, milestones: Sequence[int], gamma: float = 0.1) -> float:
    """Multiply by γ at each milestone reached: "divide by 10 after N, again after M".

    torch's MultiStepLR.
    """
    return base_lr * gamma ** bisect.bisect_right(sorted(milestones), t)


def factor_schedule(
    t: int, base_lr: float, step: int = 250, factor: float = 0.5, stop_factor_lr: float = 1e-8
) -> float:
    """MXNet's FactorScheduler: α · factor^⌊t / step⌋, never below ``stop_factor_lr``."""
    return max(step_decay(t, base_lr, step, factor), stop_factor_lr)


def multi_factor_schedule(
    t: int,
    base_lr: float,
    steps: Sequence[int] = (250, 750, 900),
    factor: float = 0.5,
) -> float:
    """MXNet's MultiFactorScheduler: α · factor^k with k the number of ``steps`` reached."""
    return multi_step(t, base_lr, steps, factor)


def exponential(t: int, base_lr: float, gamma: float) -> float:
    """Exponential decay: α γᵗ (torch's ExponentialLR)."""
    return base_lr * gamma**t
