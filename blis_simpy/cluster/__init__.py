"""The cluster control plane: the fleet of instances by id, the gateway pipeline (arrival,
admission, priority, routing) and the snapshot provider routing policies observe through.
Later: the autoscaler and the prefill/decode handoff."""
