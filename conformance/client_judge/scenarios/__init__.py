"""The scenarios, one module per area of the client-side catalogue (importing registers them)."""

from conformance.client_judge.scenarios import cancel, confirms, deliveries, errors, flow, sizes

AREA_MODULES = (cancel, confirms, errors, flow, sizes, deliveries)
