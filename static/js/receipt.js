// The receipt page: local time, copy buttons, and "Verify in this browser".
// No library: Web Crypto recomputes the hash, the Ed25519 signatures and the Merkle proof.
// Where the browser cannot check (no Web Crypto outside a secure context, no Ed25519), the page
// says "could not check here", never "failed".
"use strict";

(function () {
  document.documentElement.classList.add("js");
  // Django's JavaScript catalog (/jsi18n/) supplies gettext/interpolate in the page's language.
  var gettext = window.gettext || function (text) { return text; };
  var fmt = function (text, values) {
    return text.replace(/%\((\w+)\)s/g, function (_, key) { return values[key]; });
  };

  // --- times: the page's one form ("1 December 2026, 14:31:07 UTC", "2026年12月1日 14:31:07
  // UTC"), and the reader's local time beside the UTC one ----------------------------------
  var pageLanguage = document.documentElement.lang || "en";
  // English dates are written day, month, year, as the server writes them.
  var dateLocale = pageLanguage === "en" ? "en-GB" : pageLanguage;
  function pageTime(when, utc) {
    var zone = utc ? { timeZone: "UTC" } : {};
    try {
      var date = new Intl.DateTimeFormat(dateLocale, Object.assign({ day: "numeric", month: "long", year: "numeric" }, zone)).format(when);
      var time = new Intl.DateTimeFormat(dateLocale, Object.assign({ hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" }, zone)).format(when);
      return fmt(gettext("%(date)s, %(time)s"), { date: date, time: time }) + (utc ? " UTC" : "");
    } catch (e) {
      return utc ? when.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC") : when.toString();
    }
  }
  // A time of the verification JSON or the keys document (RFC 3339, UTC), as the page writes it.
  function utcTime(text) {
    var when = new Date(text);
    return isNaN(when) ? String(text) : pageTime(when, true);
  }
  document.querySelectorAll("time[data-local-time]").forEach(function (el) {
    var when = new Date(el.getAttribute("datetime"));
    if (isNaN(when)) return;
    var local = document.createElement("span");
    local.className = "fine local-time";
    local.textContent = " " + fmt(gettext("(your time: %(time)s)"), { time: pageTime(when, false) });
    el.after(local);
  });

  // --- copy buttons --------------------------------------------------------------------------
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    button.addEventListener("click", function () {
      var source = document.getElementById(button.dataset.copy);
      var text = source ? source.textContent : "";
      var done = function (ok) {
        var label = button.dataset.label || button.textContent;
        button.dataset.label = label;
        button.textContent = ok ? gettext("Copied") : gettext("Select the text and copy it");
        setTimeout(function () { button.textContent = label; }, 2500);
      };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(function () { done(true); }, function () { done(false); });
      } else {
        var range = document.createRange();
        range.selectNodeContents(source);
        var selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        var ok = false;
        try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
        done(ok);
      }
    });
  });

  // Printing shows the technical details too.
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  });

  // --- verify in this browser ----------------------------------------------------------------
  var panel = document.getElementById("browser-check");
  var button = document.getElementById("verify-button");
  if (!panel || !button) return;
  var list = document.getElementById("browser-results");

  function b64decode(text) {
    var bin = atob(text);
    var out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  function b64urlDecode(text) {
    var s = text.replace(/-/g, "+").replace(/_/g, "/");
    while (s.length % 4) s += "=";
    return b64decode(s);
  }
  function hex(bytes) {
    return Array.from(bytes, function (b) { return b.toString(16).padStart(2, "0"); }).join("");
  }
  function concat() {
    var total = 0, parts = Array.from(arguments);
    parts.forEach(function (p) { total += p.length; });
    var out = new Uint8Array(total), at = 0;
    parts.forEach(function (p) { out.set(p, at); at += p.length; });
    return out;
  }
  function equal(a, b) {
    if (a.length !== b.length) return false;
    for (var i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
    return true;
  }
  async function sha256(bytes) {
    return new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  }
  async function ed25519Verify(publicRaw, signature, data) {
    var key = await crypto.subtle.importKey("raw", publicRaw, { name: "Ed25519" }, false, ["verify"]);
    return crypto.subtle.verify({ name: "Ed25519" }, key, signature, data);
  }

  // RFC 9162 section 2.1.3.2
  async function verifyInclusion(leaf, index, size, proof, root) {
    if (index >= size) return false;
    var fn = index, sn = size - 1, r = await sha256(concat(new Uint8Array([0]), leaf));
    for (var i = 0; i < proof.length; i++) {
      var p = proof[i];
      if (sn === 0) return false;
      if (fn % 2 === 1 || fn === sn) {
        r = await sha256(concat(new Uint8Array([1]), p, r));
        if (fn % 2 === 0) {
          while (fn % 2 === 0 && fn !== 0) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
        }
      } else {
        r = await sha256(concat(new Uint8Array([1]), r, p));
      }
      fn = Math.floor(fn / 2); sn = Math.floor(sn / 2);
    }
    return sn === 0 && equal(r, root);
  }

  // Standard padded base64, as the server's decoder (validate=True) takes it; atob alone would
  // also take unpadded text and skip spaces.
  var BASE64 = /^(?:[A-Za-z0-9+\/]{4})*(?:[A-Za-z0-9+\/]{2}==|[A-Za-z0-9+\/]{3}=)?$/;
  var CONTROL = /[\x00-\x09\x0b-\x1f]/;  // every ASCII control except newline
  var SIGNATURE_PREFIX = "\u2014 ";  // EM DASH, space
  var MAX_SIGNATURES = 100;

  function noteName(name) {
    return name.length > 0 && !/[+\s]/.test(name) && !CONTROL.test(name);
  }

  // The C2SP verifier keys of keys.log.verifier_keys, sorted by the status that the keys
  // document gives their key (matched on the public key itself): a signature only counts when
  // its key is listed and not marked compromised, as the server's `checklog` counts them.
  // Map keys are "<name> <key id hex>".
  function noteVerifiers(keys) {
    var counted = new Map(), compromised = new Map();
    listedVerifiers(keys).forEach(function (v) {
      (v.listed.status === "compromised" ? compromised : counted).set(v.id, v.raw);
    });
    return { counted: counted, compromised: compromised };
  }

  // Each verifier key of keys.log.verifier_keys whose key the document lists:
  // {id: "<name> <key id hex>", raw, listed (the key's entry)}.
  function listedVerifiers(keys) {
    var found = [];
    (keys.log.verifier_keys || []).forEach(function (vkey) {
      // name+keyid+base64: the base64 part may itself contain "+", so split twice only.
      var first = vkey.indexOf("+"), second = vkey.indexOf("+", first + 1);
      if (first < 0 || second < 0) return;
      var name = vkey.slice(0, first), keyId = vkey.slice(first + 1, second).toLowerCase();
      var key = b64decode(vkey.slice(second + 1));
      if (key.length !== 33 || key[0] !== 1) return;  // Ed25519 (type 0x01) only
      var raw = key.slice(1);
      var listed = keys.keys.find(function (k) { return equal(b64urlDecode(k.x), raw); });
      if (!listed) return;  // a key the document does not list has no status: it cannot count
      found.push({ id: name + " " + keyId, raw: raw, listed: listed });
    });
    return found;
  }

  // RFC 3339 times as the site writes them: whether `a` is before `b` (to the microsecond;
  // Date.parse keeps milliseconds only).
  function before(a, b) {
    var exact = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.(\d{1,9}))?Z$/;
    var ma = exact.exec(a || ""), mb = exact.exec(b || "");
    if (!ma || !mb) return Date.parse(a) < Date.parse(b);
    var at = a.slice(0, 19) + (ma[1] || "").padEnd(9, "0"), bt = b.slice(0, 19) + (mb[1] || "").padEnd(9, "0");
    return at < bt;
  }

  // A re-signed receipt's `signature.evidence` (docs/verification.md), as receipt-verify
  // checks it: a note for this log, of its tree size, by a listed key other than the one that
  // signed again; the receipt's leaf in its tree; signed (by the site's own record) before a
  // compromise (its own key's, when that key is compromised). Null, or what does not hold.
  async function evidenceProblem(evidence, bytes, keys, shownKid, origin) {
    var signer = null, body = "";
    var candidates = listedVerifiers(keys).filter(function (v) { return v.listed.kid !== shownKid; });
    for (var i = 0; i < candidates.length && !signer; i++) {
      var one = await verifyNote(evidence.checkpoint, { counted: new Map([[candidates[i].id, candidates[i].raw]]), compromised: new Map() });
      if (one.ok) { signer = candidates[i].listed; body = one.body; }
    }
    var lines = body.split("\n");
    if (!signer || lines[0] !== origin || lines[1] !== String(evidence.tree_size) || !BASE64.test(lines[2] || "")) {
      return gettext("the signed record of the log it rests on (its checkpoint) is not one of this log, of its size, signed by a published key other than the one that signed again");
    }
    var proof = Array.isArray(evidence.inclusion_proof) ? evidence.inclusion_proof : [null];
    var readable = proof.every(function (p) { return typeof p === "string" && BASE64.test(p); });
    if (!readable || !Number.isInteger(evidence.leaf_index) ||
        !(await verifyInclusion(bytes, evidence.leaf_index, evidence.tree_size, proof.map(b64decode), b64decode(lines[2])))) {
      return gettext("its inclusion proof does not put this receipt in that signed record of the log");
    }
    var compromised = signer.status === "compromised" ? [signer]
      : keys.keys.filter(function (k) { return k.status === "compromised" && k.kid !== shownKid; });
    if (!compromised.some(function (k) { return before(evidence.signed_at, k.compromised_at); })) {
      return fmt(gettext("its checkpoint was signed at %(time)s, not before the compromise"), { time: utcTime(evidence.signed_at) });
    }
    return null;
  }

  // A C2SP signed note, read exactly as the server reads it (receiptsite/integrity/note.py,
  // verify_note): the text ends at the LAST blank line and every line after it is a signature
  // line. Signatures by keys that do not count are ignored, a counted key's failing signature
  // rejects the whole note, and at least one counted signature must verify. `byCompromised`
  // says that the only signature that verifies is by a key marked compromised.
  async function verifyNote(noteText, verifiers) {
    var rejected = { ok: false, body: "", byCompromised: false };
    if (typeof noteText !== "string" || !noteText.endsWith("\n") || CONTROL.test(noteText)) return rejected;
    if (noteText.isWellFormed && !noteText.isWellFormed()) return rejected;  // not UTF-8
    var split = noteText.lastIndexOf("\n\n");
    if (split < 0) return rejected;
    var body = noteText.slice(0, split + 1);
    var lines = noteText.slice(split + 2).split("\n").slice(0, -1);
    if (!lines.length || lines.length > MAX_SIGNATURES) return rejected;
    var message = new TextEncoder().encode(body);
    var verified = false, byCompromised = false;
    for (var l = 0; l < lines.length; l++) {
      var line = lines[l];
      if (!line.startsWith(SIGNATURE_PREFIX)) return rejected;
      var rest = line.slice(SIGNATURE_PREFIX.length), space = rest.indexOf(" ");
      if (space < 0) return rejected;
      var name = rest.slice(0, space), encoded = rest.slice(space + 1);
      if (!noteName(name) || !BASE64.test(encoded)) return rejected;
      var sig = b64decode(encoded);
      if (sig.length <= 4) return rejected;
      var id = name + " " + hex(sig.slice(0, 4));
      if (verifiers.counted.has(id)) {
        if (!(await ed25519Verify(verifiers.counted.get(id), sig.slice(4), message))) return rejected;
        verified = true;
      } else if (verifiers.compromised.has(id) &&
                 await ed25519Verify(verifiers.compromised.get(id), sig.slice(4), message)) {
        byCompromised = true;
      }
    }
    return { ok: verified, body: body, byCompromised: !verified && byCompromised };
  }

  // The keys' history (docs/verification.md, "The keys' history"): the listed keys, each as
  // far as a valid chain of signed key-status/v1 statements vouches for it, from the first key
  // the site published. A key the chain does not vouch for as listed is left out, unless the
  // chain says it is compromised: it is then taken as that. The same rules as receipt-verify
  // (receiptsite_client/verify/keychain.py) and the site's checklog. A document without a
  // history (an older site's) is taken as it is.
  function canonical(doc) {
    // RFC 8785 for what a statement holds (ASCII strings, integers, null, a list of strings).
    return JSON.stringify(doc, Object.keys(doc).sort());
  }
  async function statementProblem(chain, position, item) {
    var data = b64decode(item.statement);
    var doc = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(data));
    var members = ["at", "compromised_at", "format", "kid", "made_by", "position", "previous_hash", "retired_at", "signed_by", "status", "x"];
    if (doc === null || typeof doc !== "object" || Object.keys(doc).sort().join() !== members.join() || doc.format !== "key-status/v1") return "not a key-status/v1 statement";
    if (new TextEncoder().encode(canonical(doc)).join() !== data.join()) return "not in RFC 8785 form";
    if (hex(await sha256(data)) !== item.hash) return "its hash is not the SHA-256 of its bytes";
    if (doc.position !== position || doc.previous_hash !== chain.previous) return "it does not follow the statement before it";
    var kid = doc.kid, status = doc.status, signers = doc.signed_by;
    if (chain.owed.size && !(status === "compromised" && chain.owed.has(kid))) return "a key was activated without the outgoing key's signature";
    if (["active", "retired", "compromised"].indexOf(status) < 0) return "its status is not valid";
    var raw = b64urlDecode(doc.x);
    if (raw.length !== 32) return "its key is not valid";
    var thumbprint = canonical({ crv: "Ed25519", kty: "OKP", x: doc.x });
    var digest = await sha256(new TextEncoder().encode(thumbprint));
    if (btoa(String.fromCharCode.apply(null, digest)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "") !== kid) return "the kid is not the thumbprint of its key";
    var before = chain.keys.get(kid);
    if (before && before.x !== doc.x) return "it changes a key's public key";
    if (before && before.status === "compromised") return "it follows the compromise of its key";
    if ((status === "compromised") !== (doc.compromised_at !== null)) return "compromised_at is there for a compromised key only";
    if (!Array.isArray(signers) || !signers.length || new Set(signers).size !== signers.length) return "it names no signer";
    if (doc.made_by === "migration") {
      if (position === 0) chain.migrationKey = kid;
      if (signers.length !== 1 || signers[0] !== chain.migrationKey || (kid === chain.migrationKey && position)) return "a migration's statement outside its prefix";
    } else if (doc.made_by === "site") {
      chain.migrationKey = null;
    } else {
      return "it is made by no one the format knows";
    }
    var given = new Map((item.signatures || []).map(function (s) { return [s.kid, s.signature]; }));
    for (var i = 0; i < signers.length; i++) {
      var stated = signers[i] === kid ? doc : chain.keys.get(signers[i]);
      if (!stated) return "it is signed by a key the history has not stated";
      if (stated.status === "compromised") return "it is signed by a compromised key";
      if (i === 0 && stated.status !== "active" && doc.made_by !== "migration") return "its first signer is not an active key";
      if (!given.has(signers[i])) return "a signature is missing";
      var verified;
      try {
        verified = await ed25519Verify(b64urlDecode(stated.x), b64decode(given.get(signers[i])), data);
      } catch (e) {
        chain.noEd25519 = true;  // this browser cannot check Ed25519: nothing is decided
        throw e;
      }
      if (!verified) return "a signature does not verify";
    }
    if (doc.made_by === "site") {
      if (status === "active") {
        if (signers[0] !== kid) return "an activated key does not sign its own activation first";
        chain.keys.forEach(function (other, otherKid) {
          if (otherKid !== kid && other.status === "active" && signers.indexOf(otherKid) < 0) chain.owed.set(otherKid, kid);
        });
      } else if (signers[0] === kid) {
        return "a key signs its own " + status + " first";
      } else if (status === "retired" && signers.indexOf(kid) < 0) {
        return "the outgoing key did not sign its retirement";
      } else if (status === "compromised") {
        if (signers.indexOf(kid) >= 0) return "a compromised key signs its own compromise";
        chain.owed.delete(kid);
      }
    }
    chain.keys.set(kid, doc);
    return null;
  }
  async function vouchedKeys(keys) {
    if (!Array.isArray(keys.history)) return { keys: keys.keys, problem: null };
    var chain = { keys: new Map(), owed: new Map(), previous: "0".repeat(64), migrationKey: null, noEd25519: false };
    var problem = null;
    for (var position = 0; position < keys.history.length && !problem; position++) {
      try {
        problem = await statementProblem(chain, position, keys.history[position]);
      } catch (e) {
        // Without Ed25519 here the history cannot be checked, nor any signature (the checks
        // below say so): the keys are taken as listed.
        if (chain.noEd25519) return { keys: keys.keys, problem: null };
        problem = "it cannot be read";
      }
      if (problem) problem = "statement " + position + ": " + problem;
      else chain.previous = keys.history[position].hash;
    }
    if (!problem && chain.owed.size) problem = "a key was activated without the outgoing key's signature";
    chain.owed.forEach(function (successor) { chain.keys.delete(successor); });
    if (!problem && !chain.keys.size) problem = "the history is empty";
    var listed = [];
    keys.keys.forEach(function (entry) {
      var stated = chain.keys.get(entry.kid);
      var agrees = stated && stated.x === entry.x && stated.status === entry.status &&
        stated.retired_at === entry.retired_at && stated.compromised_at === (entry.compromised_at || null);
      if (agrees) {
        listed.push(entry);
      } else if (stated && stated.status === "compromised") {
        listed.push(Object.assign({}, entry, { status: "compromised", compromised_at: stated.compromised_at }));
        problem = problem || "the key " + entry.kid + " is listed otherwise than its newest statement says";
      } else {
        problem = problem || "no statement vouches for the key " + entry.kid + " as listed";
      }
    });
    return { keys: listed, problem: problem };
  }

  // --- witnesses (c2sp.org/tlog-policy, c2sp.org/tlog-cosignature) ---------------------------
  // The policy the keys document publishes (`log.witness_policy`), read as strictly as the
  // site reads a policy file (receiptsite/integrity/policy.py): `log <vkey>`, `witness <name>
  // <vkey>`, `group <name> all|any|<k> <member>...`, `quorum <name>`, comments, blank lines.
  // Returns {witnesses: Map(policy name -> {keyName, keyId (hex), raw}), groups, quorum}, or
  // throws an Error whose message names the first bad line.
  var POLICY_NONE = "none", MAX_POLICY_ENTRIES = 256;
  var POLICY_ALLOWED = /^[\t\n\x20-\x7e\u0080-\uffff]*$/;
  async function verifierKey(vkey, type) {
    // name+keyid+base64: the base64 part may itself contain "+", so split twice only.
    var first = vkey.indexOf("+"), second = vkey.indexOf("+", first + 1);
    if (first < 0 || second < 0) throw new Error("a verifier key is <name>+<key id hex>+<base64 key>");
    var name = vkey.slice(0, first), idHex = vkey.slice(first + 1, second), encoded = vkey.slice(second + 1);
    if (!noteName(name)) throw new Error("the key name " + JSON.stringify(name) + " is not a note key name");
    if (!/^[0-9a-fA-F]{8}$/.test(idHex)) throw new Error("the key id must be 8 hex digits");
    if (!BASE64.test(encoded)) throw new Error("the key is not standard base64");
    var key = b64decode(encoded);
    if (key.length !== 33 || key[0] !== type) throw new Error("only Ed25519 keys of type 0x0" + type + " are supported");
    var id = (await sha256(concat(new TextEncoder().encode(name), new Uint8Array([10]), key))).slice(0, 4);
    if (hex(id) !== idHex.toLowerCase()) throw new Error("the key id does not match the name and key");
    return { keyName: name, keyId: hex(id), raw: key.slice(1) };
  }
  async function parsePolicy(text) {
    if (typeof text !== "string" || !POLICY_ALLOWED.test(text)) throw new Error("the policy holds a control character");
    var witnesses = new Map(), groups = new Map(), quorum = null, keys = new Set(), entries = 0;
    var lines = text.split("\n");
    for (var number = 1; number <= lines.length; number++) {
      var words = lines[number - 1].replace(/\t/g, " ").split(" ").filter(Boolean);
      if (!words.length || words[0].startsWith("#")) continue;
      var keyword = words[0], args = words.slice(1), at = "line " + number + ": ";
      if (entries >= MAX_POLICY_ENTRIES) throw new Error(at + "a policy holds at most " + MAX_POLICY_ENTRIES + " entries");
      var defined = function (name) { return witnesses.has(name) || groups.has(name); };
      var fresh = function (name) {
        if (name === POLICY_NONE) throw new Error(at + "'none' is predefined and cannot be redefined");
        if (defined(name)) throw new Error(at + JSON.stringify(name) + " is defined twice");
      };
      var key;
      if (keyword === "log") {
        if (args.length < 1 || args.length > 2) throw new Error(at + "a log line is 'log <vkey> [<url>]'");
        try { key = await verifierKey(args[0], 1); } catch (e) { throw new Error(at + "the log key is not usable: " + e.message); }
        if (keys.has("log " + hex(key.raw))) throw new Error(at + "this log key is listed twice");
        keys.add("log " + hex(key.raw));
        entries++;
      } else if (keyword === "witness") {
        if (args.length < 2 || args.length > 3) throw new Error(at + "a witness line is 'witness <name> <vkey> [<url>]'");
        fresh(args[0]);
        try { key = await verifierKey(args[1], 4); } catch (e) { throw new Error(at + "the key of witness " + JSON.stringify(args[0]) + " is not usable: " + e.message); }
        if (keys.has("witness " + hex(key.raw))) throw new Error(at + "this witness key is listed twice");
        keys.add("witness " + hex(key.raw));
        witnesses.set(args[0], key);
        entries++;
      } else if (keyword === "group") {
        if (args.length < 3) throw new Error(at + "a group line is 'group <name> all|any|<k> <member>...'");
        var name = args[0], k = args[1], members = args.slice(2);
        fresh(name);
        members.forEach(function (member) {
          if (member === POLICY_NONE) throw new Error(at + "'none' cannot be a group member");
          if (!defined(member)) throw new Error(at + JSON.stringify(member) + " is not defined on an earlier line");
        });
        if (new Set(members).size !== members.length) throw new Error(at + "group " + JSON.stringify(name) + " lists a member twice");
        var threshold = k === "all" ? members.length : k === "any" ? 1 : /^[1-9][0-9]*$/.test(k) ? Number(k) : 0;
        if (!threshold || threshold > members.length) throw new Error(at + "the threshold of group " + JSON.stringify(name) + " must be all, any or a decimal k with 1 <= k <= " + members.length);
        groups.set(name, { threshold: threshold, members: members });
        entries++;
      } else if (keyword === "quorum") {
        if (args.length !== 1) throw new Error(at + "a quorum line is 'quorum <name>'");
        if (quorum !== null) throw new Error(at + "a policy has exactly one quorum line");
        if (args[0] !== POLICY_NONE && !defined(args[0])) throw new Error(at + JSON.stringify(args[0]) + " is not defined on an earlier line");
        quorum = args[0];
      } else {
        throw new Error(at + "unknown keyword " + JSON.stringify(keyword) + " (log, witness, group or quorum)");
      }
    }
    if (quorum === null) throw new Error("the policy has no quorum line");
    return { witnesses: witnesses, groups: groups, quorum: quorum };
  }
  // Whether the witnesses of these policy names (each with a valid cosignature) meet `name`.
  function policyMet(policy, name, cosigned) {
    if (name === POLICY_NONE) return true;
    if (policy.witnesses.has(name)) return cosigned.has(name);
    var group = policy.groups.get(name);
    var count = group.members.filter(function (member) { return policyMet(policy, member, cosigned); }).length;
    return count >= group.threshold;
  }

  // A cosignature's timestamp: the u64 big-endian at `offset` (POSIX seconds), exact (a Number
  // while it is below 2^53, else a BigInt: no BigInt literal, so that an older browser still
  // runs the rest of this file), or null above 2^63 - 1.
  function timestampAt(bytes, offset) {
    var view = new DataView(bytes.buffer, bytes.byteOffset + offset, 8);
    var high = view.getUint32(0), low = view.getUint32(4);
    if (high >= 0x80000000) return null;
    if (high < 0x200000) return high * 0x100000000 + low;
    return BigInt(high) * BigInt(0x100000000) + BigInt(low);
  }
  // ...as UTC, or as the number it is when no date can hold it.
  function cosignedAt(seconds) {
    if (typeof seconds !== "number" || seconds > 8640000000000) return seconds.toString();
    return pageTime(new Date(seconds * 1000), true);
  }
  function inWords(items) {
    if (window.Intl && Intl.ListFormat) {
      try { return new Intl.ListFormat(document.documentElement.lang || undefined, { type: "conjunction" }).format(items); } catch (e) { /* below */ }
    }
    return items.join(", ");
  }

  // The verification JSON's `log.witnessed`, checked against the policy of the keys document:
  // the witnessed checkpoint is a note of this log signed by a published key; the receipt's
  // leaf is in its tree; each cosignature line by a policy witness's key (its name and key id)
  // verifies over "cosignature/v1\ntime <t>\n" and the checkpoint's text (lines of other keys
  // are ignored, as the spec says; one of a policy key that fails fails it all); and the
  // cosignatures that verify meet the policy's quorum. Returns [result, detail]; throws when
  // this browser cannot check Ed25519 (the caller says "could not check here").
  async function witnessResult(witnessed, log, bytes, keys) {
    var policy;
    if (typeof keys.log.witness_policy !== "string") {
      return ["fail", gettext("The site shows cosignatures, but its keys document publishes no witness policy to check them against.")];
    }
    try {
      policy = await parsePolicy(keys.log.witness_policy);
    } catch (e) {
      return ["fail", fmt(gettext("The witness policy the site publishes cannot be read (%(problem)s)."), { problem: e.message })];
    }
    var size = witnessed.tree_size;
    var checked = await verifyNote(witnessed.checkpoint, noteVerifiers(keys));
    var lines = checked.body.split("\n");
    var root = BASE64.test(lines[2] || "") ? b64decode(lines[2]) : new Uint8Array(0);
    if (!checked.ok || lines.length < 4 || lines.slice(0, -1).some(function (l) { return !l; }) ||
        lines[0] !== keys.log.origin || !Number.isSafeInteger(size) || lines[1] !== String(size) || root.length !== 32) {
      return ["fail", gettext("The witnessed record of the log (its checkpoint) is not one of this log, of its size, signed by a published key.")];
    }
    var proof = Array.isArray(witnessed.inclusion_proof) ? witnessed.inclusion_proof : [null];
    var readable = proof.every(function (p) { return typeof p === "string" && BASE64.test(p); });
    if (!readable || !(await verifyInclusion(bytes, log.index, size, proof.map(b64decode), root))) {
      return ["fail", fmt(gettext("The log's proof does not put this receipt in the witnessed record of the log's %(size)s receipts."), { size: size })];
    }
    var note = witnessed.checkpoint;
    var signatures = note.slice(note.lastIndexOf("\n\n") + 2).split("\n").slice(0, -1);
    var cosigned = new Map();  // policy name -> the earliest time of its valid cosignature
    for (var i = 0; i < signatures.length; i++) {
      var rest = signatures[i].slice(SIGNATURE_PREFIX.length), space = rest.indexOf(" ");
      var name = rest.slice(0, space), blob = b64decode(rest.slice(space + 1));
      if (blob.length !== 4 + 8 + 64) continue;  // not a cosignature (the log's own, say)
      var keyId = hex(blob.slice(0, 4));
      var label = null;
      policy.witnesses.forEach(function (w, policyName) { if (w.keyName === name && w.keyId === keyId) label = policyName; });
      if (label === null) continue;  // a key the policy does not name: ignored
      var time = timestampAt(blob, 4);
      var message = new TextEncoder().encode("cosignature/v1\ntime " + String(time) + "\n" + checked.body);
      var valid = time !== null && time > 0 &&
        await ed25519Verify(policy.witnesses.get(label).raw, blob.slice(12), message);
      if (!valid) {
        return ["fail", fmt(gettext("The cosignature of %(name)s does not verify: the record of the log it is shown with is not one that witness signed."), { name: name })];
      }
      if (!cosigned.has(label) || time < cosigned.get(label).time) cosigned.set(label, { name: name, time: time });
    }
    var who = inWords(Array.from(cosigned.values()).sort(function (a, b) { return a.time < b.time ? -1 : a.time > b.time ? 1 : 0; })
      .map(function (c) { return fmt(gettext("%(name)s at %(time)s"), { name: c.name, time: cosignedAt(c.time) }); }));
    if (!policyMet(policy, policy.quorum, cosigned)) {
      return ["fail", cosigned.size
        ? fmt(gettext("Only %(count)s of the policy's witnesses cosigned the log's record of %(size)s receipts (%(who)s): that is not enough for the policy's quorum."), { count: cosigned.size, size: size, who: who })
        : fmt(gettext("None of the policy's witnesses cosigned the log's record of %(size)s receipts that the site shows as witnessed."), { size: size })];
    }
    return ["pass", fmt(gettext("%(count)s of the policy's witnesses cosigned the log's record of %(size)s receipts (which includes this one): %(who)s. The policy naming them comes from this site."), { count: cosigned.size, size: size, who: who })];
  }

  async function showWitnesses(log, bytes, keys, ed25519) {
    var name = "witnesses";
    if (!log.witnessed) {
      // Nothing witnessed is shown: that is no failure, and with no policy nothing is said.
      if (keys.log.witness_policy) {
        show(name, "none", gettext("The site shows no record of the log that its witnesses cosigned and that includes this receipt yet: for now only the site's own signature vouches for the log."));
      }
      return;
    }
    if (!ed25519) {
      show(name, "unchecked", gettext("This browser cannot check Ed25519 signatures, so the witnesses' cosignatures could not be checked."));
      return;
    }
    var outcome;
    try {
      outcome = await witnessResult(log.witnessed, log, bytes, keys);
    } catch (e) {
      if (e && e.name === "NotSupportedError") {
        show(name, "unchecked", gettext("This browser cannot check Ed25519 signatures, so the witnesses' cosignatures could not be checked."));
        return;
      }
      outcome = ["fail", fmt(gettext("The witnessed record of the log cannot be read (%(error)s)."), { error: e.message })];
    }
    show(name, outcome[0], outcome[1]);
  }

  // Each line: the result, the check's plain name, what was found. `check` names the check
  // (data-check), in the words of the site's own English, for whoever reads the page's data.
  var CHECK_LABELS = {
    "all checks": gettext("All checks"),
    "keys' history": gettext("Key history"),
    "hash": gettext("Fingerprint"),
    "signature": gettext("Signature"),
    "log inclusion": gettext("Public log"),
    "checkpoint signature": gettext("The log's signature"),
    "witnesses": gettext("Witnesses")
  };
  function show(check, result, detail) {
    var name = CHECK_LABELS[check] || check;
    var item = document.createElement("li");
    item.className = "check-" + result;
    item.dataset.check = check;
    var label = document.createElement("span");
    label.className = "result";
    label.textContent = result === "pass" ? gettext("pass") : result === "fail" ? gettext("FAIL")
      : result === "none" ? gettext("none yet") : gettext("could not check here");
    var strong = document.createElement("strong");
    strong.textContent = name;
    item.append(label, " ", strong, ": " + detail);
    list.append(item);
  }

  async function run() {
    list.textContent = "";
    button.disabled = true;
    try {
      if (!window.crypto || !crypto.subtle) {
        show("all checks", "unchecked", gettext("This browser offers no Web Crypto here (it needs a secure https connection). Use the commands below instead."));
        return;
      }
      var answer = await (await fetch(panel.dataset.verifyUrl, { credentials: "omit" })).json();
      var keys = await (await fetch(panel.dataset.keysUrl, { credentials: "omit" })).json();
      var vouched = await vouchedKeys(keys);
      if (vouched.problem) {
        show("keys' history", "fail", fmt(gettext("The keys' history does not check out (%(problem)s): only the keys it vouches for are believed."), { problem: vouched.problem }));
      }
      keys = { keys: vouched.keys, log: keys.log };
      var bytes = b64decode(answer.canonical_bytes);
      var digest = hex(await sha256(bytes));
      // The bytes must be this receipt's: another receipt's genuine bytes, signature and proof
      // would pass every other check.
      var documentId = null;
      try { documentId = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes)).id; } catch (e) { documentId = null; }
      var wanted = panel.dataset.receiptId;
      if (documentId !== wanted || answer.receipt_id !== wanted) {
        show("hash", "fail", fmt(gettext("The bytes are not this receipt's: they name %(found)s, not %(wanted)s."), { found: String(documentId), wanted: wanted }));
      } else {
        show("hash", digest === answer.output_hash ? "pass" : "fail",
          digest === answer.output_hash ? fmt(gettext("SHA-256 of the bytes is %(digest)s."), { digest: digest })
            : fmt(gettext("SHA-256 of the bytes is %(digest)s, not the %(stated)s the site states."), { digest: digest, stated: answer.output_hash }));
      }

      var key = keys.keys.find(function (k) { return k.kid === answer.signature.key_id; });
      var ed25519 = true;
      try {
        if (!key) {
          show("signature", "fail", fmt(gettext("The signing key %(kid)s is not published."), { kid: answer.signature.key_id }));
        } else if (key.status === "compromised") {
          // The site shows the newest signature that counts: one by a compromised key means
          // the receipt could not be shown to be logged before the key was compromised.
          show("signature", "fail", key.compromised_at
            ? fmt(gettext("The signing key is marked compromised as of %(time)s, and the receipt could not be shown to be logged before then: its signature cannot be told from a forgery."), { time: utcTime(key.compromised_at) })
            : gettext("The signing key is marked compromised."));
        } else {
          var ok = await ed25519Verify(b64urlDecode(key.x), b64decode(answer.signature.value), bytes);
          var evidence = answer.signature.evidence;
          if (ok && evidence) {
            var problem = await evidenceProblem(evidence, bytes, keys, key.kid, keys.log.origin);
            show("signature", problem ? "fail" : "pass", problem
              ? fmt(gettext("The Ed25519 signature verifies under the published key, but it was appended after a key compromise, and its evidence does not hold: %(problem)s."), { problem: problem })
              : fmt(gettext("The Ed25519 signature verifies under the published key. It was appended after a key compromise, resting on a checkpoint of %(size)s receipts (a signed record of the log) that includes this one, signed, by the site's own record, at %(time)s, before the compromise."), { size: evidence.tree_size, time: utcTime(evidence.signed_at) }));
          } else {
            show("signature", ok ? "pass" : "fail", ok ? gettext("The Ed25519 signature verifies under the published key.")
              : gettext("The Ed25519 signature does not match these bytes: they are not the bytes that were signed (or the signature was changed)."));
          }
        }
      } catch (e) {
        ed25519 = false;
        show("signature", "unchecked", gettext("This browser cannot check Ed25519 signatures. Use the commands below instead."));
      }

      if (!answer.log) {
        show("log inclusion", "fail", gettext("The site gave no log proof for this receipt."));
        return;
      }
      var log = answer.log;
      var root = b64decode(log.root_hash);
      var included = await verifyInclusion(bytes, log.index, log.tree_size, log.inclusion_proof.map(b64decode), root);
      show("log inclusion", included ? "pass" : "fail", included ? fmt(gettext("The log's proof puts this receipt in the log's signed record of its first %(size)s receipts, at place %(place)s."), { size: log.tree_size, place: log.index + 1 })
        : gettext("The log's proof does not lead from these bytes to the log's signed record: they are not the bytes that were logged."));
      if (!ed25519) {
        show("checkpoint signature", "unchecked", gettext("This browser cannot check Ed25519 signatures."));
        await showWitnesses(log, bytes, keys, false);
        return;
      }
      var checked = await verifyNote(log.checkpoint, noteVerifiers(keys));
      var expected = log.origin + "\n" + log.tree_size + "\n" + log.root_hash + "\n";
      var good = checked.ok && checked.body === expected;
      show("checkpoint signature", good ? "pass" : "fail", good ? fmt(gettext("The log's signed record of its %(size)s receipts (its checkpoint) is signed by a published key."), { size: log.tree_size })
        : checked.byCompromised ? gettext("The log's checkpoint (its signed record of every receipt) is signed only by a key marked compromised. A checkpoint carries no time, so it cannot be shown to predate the compromise.")
          : gettext("The log's checkpoint (its signed record of every receipt) has a signature or content that does not match."));
      await showWitnesses(log, bytes, keys, true);
    } catch (error) {
      show("all checks", "unchecked", fmt(gettext("The check could not run here (%(error)s). Use the commands below instead."), { error: error.message }));
    } finally {
      button.disabled = false;
    }
  }
  button.addEventListener("click", run);
})();
