"""Where requests come from: sources that hand requests to the gateway at their arrival times
(synthetic, trace replay, multi-tenant processes with sessions and closed-loop users), the
draws behind them, trace export, and importers of foreign workload descriptions."""
