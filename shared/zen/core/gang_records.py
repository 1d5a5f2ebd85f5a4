"""What Zen keeps and tells about a gang's nodes (a multi-node job: ``zen.core.gang``): ``GangNode``, one
node of an attempt as the job's row keeps it (``Job.gang``), and ``GangPlace``, a node's place in its gang
as its CONFIRM tells it (``ControlMessage.gang``)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class GangNode(BaseModel):
    """The VM that claimed rank ``rank`` of a gang's attempt, and its last report."""

    model_config = ConfigDict(frozen=True)
    rank: int
    vm: str
    region: str
    zone: str
    ip: str | None = None  # its internal address (Heartbeat.ip), for ZEN_NODE_IPS
    status: str = "CLAIMED"  # its last report's AgentStatus
    seq: int = 0  # its last report's (each node counts its own: agents send epoch milliseconds)
    beat_at: datetime  # when Zen last heard from it (its claim, first)
    exit_code: int | None = None


class GangPlace(BaseModel):
    """A node's place in its gang, told with the CONFIRM once every node has claimed its part."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    rank: int = Field(ge=0)
    nodes: int = Field(ge=2)
    ips: list[str]  # the nodes' internal addresses, rank order
    port: int = Field(ge=1, le=65535)  # rank 0 listens on it (MASTER_PORT)
