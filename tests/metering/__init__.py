"""mw_actors.metering: wire meters as actors, and the budget reserver."""
