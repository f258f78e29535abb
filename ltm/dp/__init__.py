"""The privacy arithmetic of LTM in one place: mechanisms and calibrations (enums), the grid and its
rounding, the exact integer noise samplers, sensitivities and the accounting of a job's release."""
