"""The host target: hosts with `deploy: host` get a desired-state plan (hostplan.py, `host-plan`)
and a provisioning script with its systemd unit (hostscript.py, `host-script`); its object
(compiler/deploy/hosts.py) says what it deploys and where. Its disruptions are per GPU index of a host."""
