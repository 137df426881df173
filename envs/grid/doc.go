// Package grid is the "grid" environment: a small grid world in the style
// of verl-agent's game environments. The agent (A) walks toward the goal
// (G) one move a turn (up, down, left, right) between walls (#). A reply
// that names no move, or a move into a wall or off the grid, is an invalid
// action (envs.Step.InvalidAction) and leaves the agent where it was.
// Every state's anchor observation is the grid itself, so that the steps
// of one group taken in the same state form one GiGPO anchor group. The
// layout comes from the task (its level field, else its index), so every
// rollout of a group plays the same world.
package grid
