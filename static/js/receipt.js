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

  // --- the reader's local time, beside the UTC one -----------------------------------------
  document.querySelectorAll("time[data-local-time]").forEach(function (el) {
    var when = new Date(el.getAttribute("datetime"));
    if (isNaN(when)) return;
    var local = document.createElement("span");
    local.className = "fine";
    local.textContent = " (" + when.toLocaleString() + " " + gettext("your time") + ")";
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
      return gettext("its checkpoint is not one of this log, of its tree size, signed by a published key other than the one that signed again");
    }
    var proof = Array.isArray(evidence.inclusion_proof) ? evidence.inclusion_proof : [null];
    var readable = proof.every(function (p) { return typeof p === "string" && BASE64.test(p); });
    if (!readable || !Number.isInteger(evidence.leaf_index) ||
        !(await verifyInclusion(bytes, evidence.leaf_index, evidence.tree_size, proof.map(b64decode), b64decode(lines[2])))) {
      return gettext("its inclusion proof does not put this receipt in that checkpoint's tree");
    }
    var compromised = signer.status === "compromised" ? [signer]
      : keys.keys.filter(function (k) { return k.status === "compromised" && k.kid !== shownKid; });
    if (!compromised.some(function (k) { return before(evidence.signed_at, k.compromised_at); })) {
      return fmt(gettext("its checkpoint was signed at %(time)s, not before the compromise"), { time: String(evidence.signed_at) });
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

  function show(name, result, detail) {
    var item = document.createElement("li");
    item.className = "check-" + result;
    var label = document.createElement("span");
    label.className = "result";
    label.textContent = result === "pass" ? gettext("pass") : result === "fail" ? gettext("FAIL") : gettext("could not check here");
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
        show(gettext("all checks"), "unchecked", gettext("This browser offers no Web Crypto here (it needs a secure https connection). Use the commands below instead."));
        return;
      }
      var answer = await (await fetch(panel.dataset.verifyUrl, { credentials: "omit" })).json();
      var keys = await (await fetch(panel.dataset.keysUrl, { credentials: "omit" })).json();
      var vouched = await vouchedKeys(keys);
      if (vouched.problem) {
        show(gettext("keys' history"), "fail", fmt(gettext("The keys' history does not check out (%(problem)s): only the keys it vouches for are believed."), { problem: vouched.problem }));
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
        show(gettext("hash"), "fail", fmt(gettext("The bytes are not this receipt's: they name %(found)s, not %(wanted)s."), { found: String(documentId), wanted: wanted }));
      } else {
        show(gettext("hash"), digest === answer.output_hash ? "pass" : "fail",
          digest === answer.output_hash ? fmt(gettext("SHA-256 of the bytes is %(digest)s."), { digest: digest })
            : fmt(gettext("SHA-256 of the bytes is %(digest)s, not the %(stated)s the site states."), { digest: digest, stated: answer.output_hash }));
      }

      var key = keys.keys.find(function (k) { return k.kid === answer.signature.key_id; });
      var ed25519 = true;
      try {
        if (!key) {
          show(gettext("signature"), "fail", fmt(gettext("The signing key %(kid)s is not published."), { kid: answer.signature.key_id }));
        } else if (key.status === "compromised") {
          // The site shows the newest signature that counts: one by a compromised key means
          // the receipt could not be shown to be logged before the key was compromised.
          show(gettext("signature"), "fail", key.compromised_at
            ? fmt(gettext("The signing key is marked compromised as of %(time)s, and the receipt could not be shown to be logged before then: its signature cannot be told from a forgery."), { time: key.compromised_at })
            : gettext("The signing key is marked compromised."));
        } else {
          var ok = await ed25519Verify(b64urlDecode(key.x), b64decode(answer.signature.value), bytes);
          var evidence = answer.signature.evidence;
          if (ok && evidence) {
            var problem = await evidenceProblem(evidence, bytes, keys, key.kid, keys.log.origin);
            show(gettext("signature"), problem ? "fail" : "pass", problem
              ? fmt(gettext("The Ed25519 signature verifies under the published key, but it was appended after a key compromise, and its evidence does not hold: %(problem)s."), { problem: problem })
              : fmt(gettext("The Ed25519 signature verifies under the published key. It was appended after a key compromise, resting on a checkpoint of %(size)s receipts that includes this one, signed, by the site's own record, at %(time)s, before the compromise."), { size: evidence.tree_size, time: evidence.signed_at }));
          } else {
            show(gettext("signature"), ok ? "pass" : "fail", ok ? gettext("The Ed25519 signature verifies under the published key.") : gettext("The Ed25519 signature does not verify."));
          }
        }
      } catch (e) {
        ed25519 = false;
        show(gettext("signature"), "unchecked", gettext("This browser cannot check Ed25519 signatures. Use the commands below instead."));
      }

      if (!answer.log) {
        show(gettext("log inclusion"), "fail", gettext("The site gave no log proof for this receipt."));
        return;
      }
      var log = answer.log;
      var root = b64decode(log.root_hash);
      var included = await verifyInclusion(bytes, log.index, log.tree_size, log.inclusion_proof.map(b64decode), root);
      show(gettext("log inclusion"), included ? "pass" : "fail", included ? fmt(gettext("Leaf %(index)s is in the tree of %(size)s receipts."), { index: log.index, size: log.tree_size }) : gettext("The inclusion proof does not lead to the signed root."));
      if (!ed25519) {
        show(gettext("checkpoint signature"), "unchecked", gettext("This browser cannot check Ed25519 signatures."));
        return;
      }
      var checked = await verifyNote(log.checkpoint, noteVerifiers(keys));
      var expected = log.origin + "\n" + log.tree_size + "\n" + log.root_hash + "\n";
      var good = checked.ok && checked.body === expected;
      show(gettext("checkpoint signature"), good ? "pass" : "fail", good ? fmt(gettext("The checkpoint of size %(size)s is signed by a published key."), { size: log.tree_size })
        : checked.byCompromised ? gettext("The checkpoint is signed only by a key marked compromised. A checkpoint carries no time, so it cannot be shown to predate the compromise.")
          : gettext("The checkpoint's signature or content does not match."));
    } catch (error) {
      show(gettext("all checks"), "unchecked", fmt(gettext("The check could not run here (%(error)s). Use the commands below instead."), { error: error.message }));
    } finally {
      button.disabled = false;
    }
  }
  button.addEventListener("click", run);
})();
