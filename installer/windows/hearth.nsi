; Hearth installer for Windows (NSIS 3): Hearth-Setup-<version>.exe
;
; Per-user install without admin rights into %LOCALAPPDATA%\Programs\Hearth, a Start-menu
; shortcut, an optional desktop shortcut, an entry in "Installed apps" and an uninstaller that
; keeps the user's chats and models (%LOCALAPPDATA%\Hearth) unless they tick a box.
;
; installer/build.py compiles it with the version taken from pyproject.toml:
;   makensis -NOCD -DVERSION=x.y.z -DVERSION_QUAD=x.y.z.0 -DSOURCE_DIR=dist/Hearth
;            -DOUT_FILE=dist/Hearth-Setup-x.y.z.exe -DICON_FILE=resources/icons/hearth.ico
;            installer/windows/hearth.nsi

!ifndef VERSION
  !error "Pass -DVERSION=x.y.z (installer/build.py does; pyproject.toml holds the version)"
!endif
!ifndef VERSION_QUAD
  !error "Pass -DVERSION_QUAD=x.y.z.0"
!endif
!ifndef SOURCE_DIR
  !error "Pass -DSOURCE_DIR=<the PyInstaller bundle folder, dist/Hearth>"
!endif
!ifndef OUT_FILE
  !define OUT_FILE "Hearth-Setup-${VERSION}.exe"
!endif
!ifndef ICON_FILE
  !error "Pass -DICON_FILE=resources/icons/hearth.ico"
!endif
!ifndef PUBLISHER
  !define PUBLISHER "The Hearth developers"
!endif

!define APP_NAME "Hearth"
!define APP_EXE "Hearth.exe"
!define REG_KEY "Software\Hearth"
!define UNINST_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\Hearth"
; platformdirs.user_data_dir("Hearth", False) on Windows (see app/paths.py)
!define DATA_DIR "$LOCALAPPDATA\Hearth"

Unicode true
SetCompressor /SOLID lzma
Name "${APP_NAME}"
OutFile "${OUT_FILE}"
RequestExecutionLevel user
InstallDir "$LOCALAPPDATA\Programs\${APP_NAME}"
InstallDirRegKey HKCU "${REG_KEY}" "InstallDir"
ShowInstDetails hide
ShowUninstDetails hide

!include "MUI2.nsh"
!include "nsDialogs.nsh"
!include "LogicLib.nsh"
!include "FileFunc.nsh"

!define MUI_ICON "${ICON_FILE}"
!define MUI_UNICON "${ICON_FILE}"
!define MUI_ABORTWARNING
!define MUI_COMPONENTSPAGE_NODESC
!define MUI_FINISHPAGE_RUN "$INSTDIR\${APP_EXE}"
!define MUI_FINISHPAGE_RUN_TEXT "Start Hearth"

!insertmacro MUI_PAGE_WELCOME
!insertmacro MUI_PAGE_COMPONENTS
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH

!insertmacro MUI_UNPAGE_CONFIRM
UninstPage custom un.DataPage un.DataPageLeave
!insertmacro MUI_UNPAGE_INSTFILES

!insertmacro MUI_LANGUAGE "English"

VIProductVersion "${VERSION_QUAD}"
VIFileVersion "${VERSION_QUAD}"
VIAddVersionKey /LANG=${LANG_ENGLISH} "ProductName" "${APP_NAME}"
VIAddVersionKey /LANG=${LANG_ENGLISH} "ProductVersion" "${VERSION}"
VIAddVersionKey /LANG=${LANG_ENGLISH} "FileVersion" "${VERSION}"
VIAddVersionKey /LANG=${LANG_ENGLISH} "CompanyName" "${PUBLISHER}"
VIAddVersionKey /LANG=${LANG_ENGLISH} "FileDescription" "${APP_NAME} ${VERSION} Setup"
VIAddVersionKey /LANG=${LANG_ENGLISH} "LegalCopyright" "${PUBLISHER}"

Section "Hearth (required)" SecMain
  SectionIn RO
  SetShellVarContext current
  ; Drop the previous version's files first: stale libraries must not linger, and files the
  ; app hard-linked into the user's models folder must be replaced, never rewritten in place.
  RMDir /r "$INSTDIR\_internal"
  SetOutPath "$INSTDIR"
  File /r "${SOURCE_DIR}/*"
  WriteUninstaller "$INSTDIR\Uninstall.exe"
  CreateShortcut "$SMPROGRAMS\${APP_NAME}.lnk" "$INSTDIR\${APP_EXE}" "" "$INSTDIR\${APP_EXE}" 0

  WriteRegStr HKCU "${REG_KEY}" "InstallDir" "$INSTDIR"
  WriteRegStr HKCU "${UNINST_KEY}" "DisplayName" "${APP_NAME}"
  WriteRegStr HKCU "${UNINST_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKCU "${UNINST_KEY}" "Publisher" "${PUBLISHER}"
  WriteRegStr HKCU "${UNINST_KEY}" "DisplayIcon" "$INSTDIR\${APP_EXE}"
  WriteRegStr HKCU "${UNINST_KEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKCU "${UNINST_KEY}" "UninstallString" '"$INSTDIR\Uninstall.exe"'
  WriteRegStr HKCU "${UNINST_KEY}" "QuietUninstallString" '"$INSTDIR\Uninstall.exe" /S'
  WriteRegDWORD HKCU "${UNINST_KEY}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINST_KEY}" "NoRepair" 1
  ${GetSize} "$INSTDIR" "/S=0K" $0 $1 $2
  IntFmt $0 "0x%08X" $0
  WriteRegDWORD HKCU "${UNINST_KEY}" "EstimatedSize" "$0"
SectionEnd

Section /o "Desktop shortcut" SecDesktop
  SetShellVarContext current
  CreateShortcut "$DESKTOP\${APP_NAME}.lnk" "$INSTDIR\${APP_EXE}" "" "$INSTDIR\${APP_EXE}" 0
SectionEnd

; --- Uninstaller ---------------------------------------------------------------------------

Var DeleteData
Var DeleteDataBox

Function un.DataPage
  !insertmacro MUI_HEADER_TEXT "Your chats and models" "Choose whether to keep them."
  nsDialogs::Create 1018
  Pop $0
  ${If} $0 == error
    Abort
  ${EndIf}
  ${NSD_CreateLabel} 0 0 100% 40u "Hearth keeps your chats, models and settings in ${DATA_DIR}. \
They stay on this computer, so installing Hearth again finds them, unless you tick the box below."
  Pop $0
  ${NSD_CreateCheckbox} 0 48u 100% 12u "&Also delete my chats, models and settings"
  Pop $DeleteDataBox
  nsDialogs::Show
FunctionEnd

Function un.DataPageLeave
  ${NSD_GetState} $DeleteDataBox $DeleteData
FunctionEnd

Section "Uninstall"
  SetShellVarContext current
  Delete "$SMPROGRAMS\${APP_NAME}.lnk"
  Delete "$DESKTOP\${APP_NAME}.lnk"
  ; Remove only what the installer put there: the folder may have been chosen by the user.
  RMDir /r "$INSTDIR\_internal"
  Delete "$INSTDIR\${APP_EXE}"
  Delete "$INSTDIR\Uninstall.exe"
  RMDir "$INSTDIR"
  DeleteRegKey HKCU "${UNINST_KEY}"
  DeleteRegKey HKCU "${REG_KEY}"
  ; A silent uninstall (/S) never shows the page, so it always keeps the data.
  ${If} $DeleteData == ${BST_CHECKED}
    RMDir /r "${DATA_DIR}"
  ${EndIf}
SectionEnd
