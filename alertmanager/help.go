package alertmanager

import "maps"

// help is the # HELP text of each family the notifiers register.
var help = map[string]string{
	"inferwatch_notifications_total": "Alert notifications per destination and result: sent, failed (given up, refused or invalid), dropped (queue full or notifier stopped).",
}

// MetricHelp returns the # HELP text of every family this package
// registers, for metricset.Set.AddHelp.
func MetricHelp() map[string]string { return maps.Clone(help) }
