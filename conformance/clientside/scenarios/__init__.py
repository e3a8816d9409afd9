"""The scenarios, one module per area of the client-side catalogue (importing registers them)."""

from conformance.clientside.scenarios import cancel, confirms, deliveries, errors, flow, sizes

AREA_MODULES = (cancel, confirms, errors, flow, sizes, deliveries)
