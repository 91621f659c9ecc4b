"""Test plugin: a service whose graceful drain never finishes, to exercise the forced exit."""

from __future__ import annotations

import trio

from kernel import Phase, ServiceSpec, hookimpl


class SlowDrain:
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()

    async def drain(self) -> None:
        print("draining", flush=True)
        await trio.sleep_forever()


@hookimpl
def trocket_register_services(ctx: object) -> list[ServiceSpec]:
    return [ServiceSpec("slow_drain", Phase.INGRESS, lambda runtime: SlowDrain())]
