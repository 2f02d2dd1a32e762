# The script that the script-mode cases here name, so that they show only their own error.
