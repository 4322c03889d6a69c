"""What bounded the winner's concurrency and the headroom it leaves, in VRAM (predicted and
measured) and, with HiCache, in host RAM."""

from __future__ import annotations

from autotune.planner.dispatch import is_cpu_target
from autotune.report.collect.data import GIB, Capacity, ReportData, num
from autotune.report.collect.provenance import gpu_spec


def winner_capacity(data: ReportData) -> Capacity | None:
    w = data.winner
    if w is None:
        return None
    plan = w.plan or {}
    launch = w.launch or {}
    cap = Capacity(
        bound_by=plan.get("bound_by"),
        max_running_requests=plan.get("max_running_requests"),
        kv_pool_tokens=plan.get("kv_pool_tokens"),
        mamba_slots=plan.get("mamba_slots"),
        slots_per_request=plan.get("slots_per_request"),
        launch_kv_pool_tokens=launch.get("kv_pool_tokens"),
        launch_mamba_slots=launch.get("mamba_slots"),
        launch_max_running_requests=launch.get("max_running_requests"),
        free_after_startup_gib=num(launch.get("available_gpu_mem_gib")),
        cpu=is_cpu_target(data.provenance.gpu),
    )
    per = cap.slots_per_request or 1
    cap.bound_text = {
        "kv_tokens": "the KV cache pool (KV tokens)",
        "mamba_slots": f"the mamba state slots (hybrid model, {per} slot{'s' if per > 1 else ''}"
        " per request)",
        "user": "max_running_requests as configured",
        "default": "the engine's default max_running_requests (neither pool was the limit)",
    }.get(str(cap.bound_by), "unknown (no planner prediction was stored)")
    gpu = gpu_spec(data.provenance.gpu)
    if gpu is not None:
        cap.gpu_memory_gib = round(gpu.memory_gib, 2)
    slack, need = num(plan.get("slack_gib")), num(plan.get("slack_needed_gib"))
    if slack is not None and need is not None:
        cap.vram_headroom_gib = round(slack - need, 2)
        if cap.gpu_memory_gib is not None:
            cap.predicted_use_gib = round(cap.gpu_memory_gib - cap.vram_headroom_gib, 2)
    peak_mib = w.vram_peak_mib
    if peak_mib is not None:
        cap.vram_peak_gib = round(peak_mib / 1024, 2)
        if cap.gpu_memory_gib is not None:
            cap.measured_headroom_gib = round(cap.gpu_memory_gib - cap.vram_peak_gib, 2)
    cap.hicache = bool(w.config.get("enable_hierarchical_cache"))
    if cap.hicache:
        cap.host_pool_gb = num(plan.get("host_pool_gb")) or num(launch.get("host_pool_gb"))
        cap.host_mamba_gb = num(plan.get("host_mamba_gb"))
        cap.host_available_gib = num(plan.get("host_available_gib"))
        if cap.host_available_gib is not None and cap.host_pool_gb is not None:
            used_gib = (cap.host_pool_gb + (cap.host_mamba_gb or 0.0)) * 1e9 / GIB
            cap.host_headroom_gib = round(cap.host_available_gib - used_gib, 2)
    return cap
