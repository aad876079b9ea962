"""The cluster control plane: gateway pipeline, snapshots, router state."""
