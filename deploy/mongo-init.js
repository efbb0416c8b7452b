// MongoDB initialisation for benanza, run once by the official mongo image (with mongosh)
// when its data volume is empty: docker-entrypoint-initdb.d, as the root user.
//
// Creates the application user (readWrite on the benanza database only) from the
// environment (deploy/.env, see .env.example), and the indexes benanza's MongoDB store
// (benanza/store/mongo.py, INDEXES) creates on every open, with the same names and options,
// so that they exist before the first write and the store finds them as it expects.

const dbName = process.env.BENANZA_MONGO_DB || "benanza";
const user = process.env.BENANZA_MONGO_USER;
const password = process.env.BENANZA_MONGO_PASSWORD;
if (!user || !password) {
  throw new Error("set BENANZA_MONGO_USER and BENANZA_MONGO_PASSWORD (deploy/.env.example)");
}

const benanza = db.getSiblingDB(dbName);
benanza.createUser({ user: user, pwd: password, roles: [{ role: "readWrite", db: dbName }] });

// One document per result identity (benanza/store/records.py IDENTITY_FIELDS): writing a
// result again replaces it, so retried (at-least-once) benchmark calls never duplicate.
benanza.results.createIndex(
  { system: 1, stack_id: 1, runtime: 1, kind: 1, key: 1, batch_size: 1, dtype: 1, variant: 1 },
  { name: "identity", unique: true },
);
// The planner's question: which specs are already measured for this system and stack?
benanza.results.createIndex(
  { system: 1, stack_id: 1, schema_version: 1, spec_id: 1 },
  { name: "present", unique: false },
);
benanza.stacks.createIndex({ system: 1, stack_id: 1 }, { name: "stack", unique: true });
// Claims of two drivers on the same plan: one lease per (system, stack, spec).
benanza.leases.createIndex({ system: 1, stack_id: 1, spec_id: 1 }, { name: "lease", unique: true });
// A driver renews all its leases at once (heartbeat): by owner.
benanza.leases.createIndex({ owner: 1 }, { name: "lease_owner", unique: false });

// A plan (the units a model was benchmarked as) per identity; its content is stored once in plan_docs.
benanza.plans.createIndex(
  { system: 1, stack_id: 1, runtime: 1, variant: 1, model_key: 1, batch_size: 1, granularities: 1 },
  { name: "plan", unique: true },
);
// Earlier runs of a result (repeats, bounded per identity): one per identity and time.
benanza.repeats.createIndex(
  { system: 1, stack_id: 1, runtime: 1, kind: 1, key: 1, batch_size: 1, dtype: 1, variant: 1, measured_at: 1 },
  { name: "repeat", unique: true },
);

print(`benanza: user ${user} and indexes created in database ${dbName}`);
