"""Flows: chains, groups, chords and batches of ordinary jobs that finish exactly
once. This room owns the compositions and their compilation into a DAG (``compose.py``, pure),
storing a flow and changing it (``store.py``: one script call each; the scripts are
``enqueue_flow.lua``, ``flow_inputs.lua``, ``flow_close.lua``, ``flow_cancel.lua`` and
``lua/_flows.lua``, one of the parts ``_lib.lua`` lists, where a member settles inside its ack or bury),
the producer's handles (``handle.py``: ``Flow``, ``Batch``), the app's side (``producer.py``)
and the read model (``read.py``). It imports the engine only (its rank is that of scheduling
and stores).

Read functions (``FlowReader(redis_client)``, for the pages, the API and the CLI):

- ``counts(queue) -> dict[str, int]``: flows per state (``FLOW_STATES``)
- ``list_flows(queue, state='running', offset=0, limit=50) -> FlowPage``: newest first, each a
  ``FlowRow`` (id, kind, state, description, policy, total, done, failed, pending,
  created_at, finished_at, open, failed_job, failed_reason, cancelled_by, cancel_reason;
  ``progress``, ``finished``)
- ``get(queue, flow_id) -> FlowRow | None``
- ``tree(queue, flow_id, offset=0, limit=500) -> FlowTree | None``: the flow and a page of its
  jobs in the order made, each a ``FlowJob`` (id, type, state, attempt, parents, children,
  hook, last_error, idempotency_key)
- ``links(queue, job_id) -> FlowLinks | None``: a job's flow id and state, parents, children
- ``results(queue, flow_id) -> list[Any]``: the flow's last jobs' results in order
  (``ChildFailure`` for a member settled as failed)
"""

from antre.flows.compose import Chain, Chord, FlowOptions, Parallel, Step, compile_steps
from antre.flows.handle import Batch, Flow, FlowTimeout
from antre.flows.producer import FlowProducer
from antre.flows.read import (FINAL_STATES, FLOW_STATES, ChildFailure, FlowJob, FlowLinks,
                              FlowPage, FlowReader, FlowRow, FlowTree, decode_result)
from antre.flows.store import CancelSummary, FlowError, result_max

__all__ = ["FINAL_STATES", "FLOW_STATES", "Batch", "CancelSummary", "Chain", "ChildFailure",
           "Chord", "Flow", "FlowError", "FlowJob", "FlowLinks", "FlowOptions", "FlowPage",
           "FlowProducer", "FlowReader", "FlowRow", "FlowTimeout", "FlowTree", "Parallel", "Step",
           "compile_steps", "decode_result", "result_max"]
